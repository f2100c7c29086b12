"""denv's Python package: sandboxes (``denv.Sandbox``, ``denv.AsyncSandbox``), a client of the /v1
API (standard library only) and adapters for
Inspect (``sandbox="denv"``), Harbor (``denv.harbor:DenvEnvironment``) and OpenEnv
(``denv.openenv.DenvProvider``). Each adapter imports its framework lazily: ``import denv`` never
needs one."""

from .client import Client, Deployment, Environment, ExecOutput, FileEntry, Project
from .errors import (
    ERROR_CODES,
    AuthenticationError,
    ConflictError,
    DenvError,
    FrameworkMissingError,
    ImageError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    NotSupportedError,
    OperationTimeoutError,
    PayloadTooLargeError,
    PermissionDeniedError,
    RateLimitError,
    ServiceFailedError,
    StorageError,
    UnavailableError,
)
from .sandbox import AsyncSandbox, CommandResult, Sandbox

__version__ = "0.1.0"

__all__ = [
    "ERROR_CODES",
    "AsyncSandbox",
    "AuthenticationError",
    "Client",
    "CommandResult",
    "ConflictError",
    "DenvError",
    "Deployment",
    "Environment",
    "ExecOutput",
    "FileEntry",
    "FrameworkMissingError",
    "ImageError",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "NotSupportedError",
    "OperationTimeoutError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "Project",
    "RateLimitError",
    "Sandbox",
    "ServiceFailedError",
    "StorageError",
    "UnavailableError",
    "__version__",
]
