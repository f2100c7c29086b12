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
    "payload_too_large": 413,
    "timeout": 504,
    "unavailable": 503,
    "host_unavailable": 503,
    "rate_limited": 429,
    "insufficient_storage": 507,
    "image_not_found": 422,
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


class FrameworkMissingError(ImportError):
    """An adapter was imported without its framework installed."""

    def __init__(self, framework: str, module: str, extra: str) -> None:
        super().__init__(
            f"denv.{extra} needs {framework}, which is not installed (import {module!r} failed): "
            f"pip install 'denv[{extra}]'"
        )
        self.framework = framework
