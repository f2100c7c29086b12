"""Stand-in for the parts of ``inspect_ai.util`` the denv adapter imports (see ../README.md)."""

from __future__ import annotations

import abc
import contextlib
import contextvars
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from _kwmodel import KwModel

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
def override_sandbox_output_limit(limit: int, *operations: str):  # noqa: ANN201
    """The one override Inspect exports: the output limit for the named operations ("exec",
    "read_file"), or for both when none is named, for the duration of the block."""
    vars_ = {"exec": _max_exec, "read_file": _max_read}
    unknown = set(operations) - set(vars_)
    if unknown:
        raise ValueError(f"unknown sandbox operation(s): {sorted(unknown)}")
    tokens = [(v, v.set(limit)) for k, v in vars_.items() if not operations or k in operations]
    try:
        yield
    finally:
        for v, t in reversed(tokens):
            v.reset(t)


class ComposeConfig(KwModel):
    """Inspect's pydantic model of a compose file (services only, here)."""

    services: dict[str, Any]

    @classmethod
    def model_validate(cls, data: dict[str, Any]) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("services"), dict):
            raise ValueError("a compose config needs a services mapping")
        return cls(services={k: dict(v or {}) for k, v in data["services"].items()},
                   **{k: v for k, v in data.items() if k != "services" and k in cls._fields()})


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

    async def exec_remote(self, cmd: list[str], options: Any = None, *, stream: bool = True) -> Any:
        """Not abstract: Inspect injects its tools binary through exec/write_file and runs a server
        in the sandbox. Here only the awaitable form, over exec, with what __init__ set."""
        assert hasattr(self, "_tools_injected"), "a subclass must call SandboxEnvironment.__init__"
        if stream:
            raise NotImplementedError("the stand-in has no streaming exec_remote")
        return await self.exec(cmd)

    def as_type(self, sandbox_cls: type) -> Any:
        if not isinstance(self, sandbox_cls):
            raise TypeError(f"{type(self).__name__} is not a {sandbox_cls.__name__}")
        return self

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> Any:
        raise NotImplementedError(f"{cls.__name__} does not deserialize configs")

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


def deserialize_sandbox_specific_config(type: str, config: dict[str, Any]) -> Any:  # noqa: A002
    """What Inspect does with a dict config read back (from a log, or a task's spec): a
    docker-compatible provider's is validated as a ComposeConfig first, else the provider's own
    config_deserialize is asked."""
    cls = registry_find_sandboxenv(type)
    if cls.is_docker_compatible():
        try:
            return ComposeConfig.model_validate(config)
        except (ValueError, TypeError):
            pass
    return cls.config_deserialize(config)
