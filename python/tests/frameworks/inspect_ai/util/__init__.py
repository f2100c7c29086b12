"""Stand-in for the parts of ``inspect_ai.util`` the denv adapter imports (see ../README.md)."""

from __future__ import annotations

import abc
import contextlib
import contextvars
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T", str, bytes)

SandboxEnvironmentConfigType = Any
_REGISTRY: dict[str, type] = {}


@dataclass
class ExecResult(Generic[T]):
    success: bool
    returncode: int
    stdout: T
    stderr: T


class OutputLimitExceededError(Exception):
    def __init__(self, limit_str: str, truncated_output: str | None) -> None:
        self.limit_str = limit_str
        self.truncated_output = truncated_output
        super().__init__(f"The sandbox output stream limit of {limit_str} was exceeded.")


class SandboxUnavailableError(RuntimeError):
    pass


def _size_str(n: int) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size} {unit}"
    return f"{n} B"


_max_read = contextvars.ContextVar("max_read", default=100 * 1024**2)
_max_exec = contextvars.ContextVar("max_exec", default=10 * 1024**2)


class _Limit:
    """A value read from a ContextVar at each access, as Inspect's descriptors are."""

    def __init__(self, var: contextvars.ContextVar[int], as_str: bool) -> None:
        self.var, self.as_str = var, as_str

    def __get__(self, obj: object, owner: type) -> Any:
        v = self.var.get()
        return _size_str(v) if self.as_str else v


class SandboxEnvironmentLimits:
    MAX_READ_FILE_SIZE = _Limit(_max_read, False)
    MAX_READ_FILE_SIZE_STR = _Limit(_max_read, True)
    MAX_EXEC_OUTPUT_SIZE = _Limit(_max_exec, False)
    MAX_EXEC_OUTPUT_SIZE_STR = _Limit(_max_exec, True)


@contextlib.contextmanager
def override_max_read_file_size(n: int):  # noqa: ANN201
    token = _max_read.set(n)
    try:
        yield
    finally:
        _max_read.reset(token)


@contextlib.contextmanager
def override_max_exec_output_size(n: int):  # noqa: ANN201
    token = _max_exec.set(n)
    try:
        yield
    finally:
        _max_exec.reset(token)


class SandboxEnvironment(abc.ABC):
    def __init__(self) -> None:
        self._inject_lock = object()
        self._tools_injected = False
        self._tools_user = None

    @abc.abstractmethod
    async def exec(self, cmd, input=None, cwd=None, env=None, user=None, timeout=None,  # noqa: ANN001
                   timeout_retry=True, concurrency=True): ...

    @abc.abstractmethod
    async def write_file(self, file: str, contents: str | bytes) -> None: ...

    @abc.abstractmethod
    async def read_file(self, file: str, text: bool = True) -> str | bytes: ...

    @classmethod
    @abc.abstractmethod
    async def sample_cleanup(cls, task_name, config, environments, interrupted) -> None: ...  # noqa: ANN001

    async def connection(self, *, user: str | None = None) -> Any:
        raise NotImplementedError("connection not implemented")

    def default_polling_interval(self) -> float:
        return 2

    @classmethod
    def default_concurrency(cls) -> int | None:
        return None

    @classmethod
    async def task_init(cls, task_name, config) -> None: ...  # noqa: ANN001

    @classmethod
    async def task_init_environment(cls, config, metadata) -> dict[str, str]:  # noqa: ANN001
        return {}

    @classmethod
    async def sample_init(cls, task_name, config, metadata) -> dict:  # noqa: ANN001
        return {}

    @classmethod
    async def task_cleanup(cls, task_name, config, cleanup) -> None: ...  # noqa: ANN001

    @classmethod
    async def cli_cleanup(cls, id) -> None: ...  # noqa: ANN001

    @classmethod
    def config_files(cls) -> list[str]:
        return []

    @classmethod
    def is_docker_compatible(cls) -> bool:
        return any("compose.yaml" in f for f in cls.config_files())


def sandboxenv(name: str):  # noqa: ANN201
    """Registers a class, or a zero-argument function returning one (called at once)."""

    def wrap(obj):  # noqa: ANN001, ANN202
        cls = obj if isinstance(obj, type) else obj()
        _REGISTRY[name] = cls
        return obj

    return wrap


def registry_find_sandboxenv(name: str) -> type:
    if name not in _REGISTRY:
        raise ValueError(f"SandboxEnvironment type '{name}' not recognized.")
    return _REGISTRY[name]
