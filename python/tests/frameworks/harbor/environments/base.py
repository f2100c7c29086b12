"""Stand-in for harbor.environments.base (0.13.1 plus the newer per-service operations), reduced
to what the denv adapter and a trial touch (see ../../README.md). Like Harbor's, the constructor
reads subclass members (type(), capabilities, _validate_definition) before it returns."""

from __future__ import annotations

import contextlib
import logging
import shlex
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from _kwmodel import KwModel
from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.models.task.config import NetworkMode

MAIN_SERVICE_NAME = "main"
_COMPOSE_NAMES = ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml")


class ExecResult(KwModel):
    """A pydantic model in Harbor: keyword-only, and return_code is required."""

    stdout: str | None = None
    stderr: str | None = None
    return_code: int


class ServiceOperationsUnsupportedError(RuntimeError):
    pass


class BaseEnvironment(ABC):
    def __init__(self, environment_dir, environment_name, session_id, trial_paths, task_env_config,  # noqa: ANN001
                 logger=None, override_cpus=None, override_memory_mb=None, override_storage_mb=None,  # noqa: ANN001
                 override_gpus=None, override_tpu=None, cpu_enforcement_policy=None,  # noqa: ANN001
                 memory_enforcement_policy=None, persistent_env=None, mounts=None,  # noqa: ANN001
                 network_policy=None, extra_docker_compose=None, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
        self.environment_dir = Path(environment_dir)
        self.environment_name = environment_name
        self.session_id = session_id
        self.trial_paths = trial_paths
        self.task_env_config = task_env_config
        self.logger = logger or logging.getLogger("harbor")
        self.default_user: str | int | None = None
        self._mounts = list(mounts or [])
        self.network_policy = network_policy
        # The trial's persistent env wins over the task's [environment].env (which compose tasks
        # hand to compose instead).
        task_env = {} if self._uses_compose else dict(task_env_config.env or {})
        self._persistent_env = {**task_env, **dict(persistent_env or {})}
        self._validate_definition()
        type(self).resource_capabilities()
        self.type()
        self._validate_network_policy_support()

    def _validate_network_policy_support(self) -> None:
        mode = getattr(self.network_policy, "network_mode", NetworkMode.PUBLIC)
        if mode == NetworkMode.NO_NETWORK and not self.capabilities.disable_internet:
            raise ValueError("this environment cannot disable the internet")
        if mode == NetworkMode.ALLOWLIST and not self.capabilities.network_allowlist:
            raise ValueError("this environment cannot enforce a network allowlist")

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities()

    @classmethod
    def resource_capabilities(cls) -> Any:
        return None

    @property
    def _uses_compose(self) -> bool:
        return False

    @staticmethod
    @abstractmethod
    def type() -> str: ...

    @abstractmethod
    def _validate_definition(self) -> None: ...

    @abstractmethod
    async def start(self, force_build: bool) -> None: ...

    @abstractmethod
    async def stop(self, delete: bool) -> None: ...

    @abstractmethod
    async def upload_file(self, source_path: Path | str, target_path: str) -> None: ...

    @abstractmethod
    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None: ...

    @abstractmethod
    async def download_file(self, source_path: str, target_path: Path | str) -> None: ...

    @abstractmethod
    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None: ...

    @abstractmethod
    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult: ...

    # helpers the trial calls, built on exec
    def _resolve_user(self, user: str | int | None) -> str | int | None:
        return user if user is not None else self.default_user

    def _merge_env(self, env: dict[str, str] | None) -> dict[str, str] | None:
        merged = {**self._persistent_env, **(env or {})}
        return merged or None

    def _mount_targets(self, writable_only: bool = False) -> list[str]:
        return [m["target"] for m in self._mounts if not (writable_only and m.get("read_only"))]

    @contextlib.contextmanager
    def with_default_user(self, user: str | int | None):  # noqa: ANN201
        before = self.default_user
        self.default_user = user
        try:
            yield
        finally:
            self.default_user = before

    async def ensure_dirs(self, dirs: list[str], *, chmod: bool = True) -> ExecResult:
        """Makes the directories (as root) and answers with the result; it does not raise."""
        if not dirs:
            return ExecResult(return_code=0)
        quoted = " ".join(shlex.quote(d) for d in dirs)
        cmd = f"mkdir -p {quoted}" + (f" && chmod 777 {quoted}" if chmod else "")
        return await self.exec(cmd, user="root")

    async def is_dir(self, path: str, user: str | int | None = None) -> bool:
        return (await self.exec(f"test -d {shlex.quote(path)}", user=user)).return_code == 0

    async def is_file(self, path: str, user: str | int | None = None) -> bool:
        return (await self.exec(f"test -f {shlex.quote(path)}", user=user)).return_code == 0

    async def _upload_environment_dir_after_start(self) -> None:
        """A task with a docker_image and neither a Dockerfile nor a compose file: its environment/
        files go into the workdir."""
        cfg = self.task_env_config
        d = self.environment_dir
        if not cfg.docker_image or not cfg.workdir or not d.is_dir():
            return
        if (d / "Dockerfile").exists() or any((d / n).exists() for n in _COMPOSE_NAMES):
            return
        if any(d.iterdir()):
            await self.upload_dir(d, cfg.workdir)

    @staticmethod
    def is_main_service(service: str | None) -> bool:
        return service is None or service == MAIN_SERVICE_NAME

    async def service_exec(self, command: str, *, service: str | None = None, cwd=None, env=None,  # noqa: ANN001
                           timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        if self.is_main_service(service):
            return await self.exec(command, cwd=cwd, env=env, timeout_sec=timeout_sec, user=user)
        raise ServiceOperationsUnsupportedError(service)

    async def stop_service(self, service: str) -> None:
        raise ServiceOperationsUnsupportedError(service)
