"""denv's Python package: a client of the /v1 API (standard library only) and adapters for
Inspect (``sandbox="denv"``), Harbor (``denv.harbor:DenvEnvironment``) and OpenEnv
(``denv.openenv.DenvProvider``). Each adapter imports its framework lazily: ``import denv`` never
needs one."""

from .client import Client, Deployment, Environment, ExecOutput, Project
from .errors import ERROR_CODES, DenvError, FrameworkMissingError

__version__ = "0.1.0"

__all__ = [
    "ERROR_CODES",
    "Client",
    "DenvError",
    "Deployment",
    "Environment",
    "ExecOutput",
    "FrameworkMissingError",
    "Project",
    "__version__",
]
