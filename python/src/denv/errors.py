"""The server's error table, as Python exceptions.

Every failure the server reports carries one stable code (the same table as the TypeScript
packages' ``ERROR_CODES``); :class:`DenvError` keeps it, the HTTP status and the server's message,
so callers branch on ``err.code`` and never on message text.
"""

from __future__ import annotations

from typing import Any

#: The codes the server may send, with their HTTP status (packages/protocol/src/errors.ts; a test
#: checks this table against the OpenAPI document's ``x-denv-error-codes``).
ERROR_CODES: dict[str, int] = {
    "invalid_argument": 400,
    "spec_invalid": 422,
    "not_found": 404,
    "conflict": 409,
    "unauthenticated": 401,
    "forbidden": 403,
    "permission_denied": 403,
    "is_directory": 409,
    "not_a_directory": 409,
    "invalid_path": 400,
    "payload_too_large": 413,
    "quota_exceeded": 413,
    "timeout": 504,
    "unavailable": 503,
    "host_unavailable": 503,
    "rate_limited": 429,
    "capacity": 503,
    "not_supported": 501,
    "insufficient_storage": 507,
    "service_failed": 422,
    "image_not_found": 422,
    "build_failed": 422,
    "registry_error": 502,
    "engine_error": 502,
    "storage_error": 500,
    "internal": 500,
}


class DenvError(Exception):
    """A failure reported by the denv server (or reaching it), with its stable code."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        status: int | None = None,
        details: Any = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status
        self.details = details


class NotFoundError(DenvError):
    """``not_found``: no such object (another team's included), path, or route."""


class InvalidArgumentError(DenvError):
    """``invalid_argument``, ``spec_invalid``, ``invalid_path``: the request, compose file or path was refused."""


class AuthenticationError(DenvError):
    """``unauthenticated``: no key, or a key the server does not know."""


class PermissionDeniedError(DenvError):
    """``forbidden``, ``permission_denied``: the key, or the user a file operation ran as, may not."""


class ConflictError(DenvError):
    """``conflict``, ``is_directory``, ``not_a_directory``: not in a state (or of a kind) for this."""


class RateLimitError(DenvError):
    """``rate_limited``: over the key's rate limit; ``details["retry_after_ms"]`` says when to retry."""


class PayloadTooLargeError(DenvError):
    """``payload_too_large``, ``quota_exceeded``: the body, what was asked for, or the stored bytes are over a limit."""


class OperationTimeoutError(DenvError):
    """``timeout``: an operation ran past its deadline."""


class UnavailableError(DenvError):
    """``unavailable``, ``host_unavailable``, ``capacity``: the server, host or service cannot
    answer (or take more) now; retry."""


class NotSupportedError(DenvError):
    """``not_supported``: the environment's target cannot do this at all (its row in /v1/targets
    says why); do not retry."""


class StorageError(DenvError):
    """``insufficient_storage``, ``storage_error``: the host's storage refused."""


class ServiceFailedError(DenvError):
    """``service_failed``: a service exited, or a command the file declares failed; the exit code
    and last lines are in ``details``. Not retryable as it is."""


class ImageError(DenvError):
    """``image_not_found``, ``registry_error``, ``build_failed``: an image could not be found, pinned or built."""


class InternalError(DenvError):
    """``internal``, ``engine_error``, and codes this package does not know."""


#: Each code's family (a test holds the keys to ERROR_CODES).
ERROR_FAMILIES: dict[str, type[DenvError]] = {
    "invalid_argument": InvalidArgumentError,
    "spec_invalid": InvalidArgumentError,
    "invalid_path": InvalidArgumentError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "is_directory": ConflictError,
    "not_a_directory": ConflictError,
    "unauthenticated": AuthenticationError,
    "forbidden": PermissionDeniedError,
    "permission_denied": PermissionDeniedError,
    "payload_too_large": PayloadTooLargeError,
    "quota_exceeded": PayloadTooLargeError,
    "timeout": OperationTimeoutError,
    "unavailable": UnavailableError,
    "host_unavailable": UnavailableError,
    "capacity": UnavailableError,
    "rate_limited": RateLimitError,
    "not_supported": NotSupportedError,
    "insufficient_storage": StorageError,
    "storage_error": StorageError,
    "service_failed": ServiceFailedError,
    "image_not_found": ImageError,
    "build_failed": ImageError,
    "registry_error": ImageError,
    "engine_error": InternalError,
    "internal": InternalError,
}


def error_for(code: str, message: str, *, status: int | None = None, details: Any = None) -> DenvError:
    """The error for a code, of its family's class (``InternalError`` for a code not known here)."""
    return ERROR_FAMILIES.get(code, InternalError)(code, message, status=status, details=details)


class FrameworkMissingError(ImportError):
    """An adapter was imported without its framework installed."""

    def __init__(self, framework: str, module: str, extra: str) -> None:
        super().__init__(
            f"denv.{extra} needs {framework}, which is not installed (import {module!r} failed): "
            f"pip install 'denv[{extra}]'"
        )
        self.framework = framework
