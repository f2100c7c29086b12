"""Stand-in for harbor.environments.base (0.13.1 plus the newer per-service operations), reduced
to what the denv adapter and a trial touch (see ../../README.md). Like Harbor's, the constructor
reads subclass members (type(), capabilities, _validate_definition) before it returns."""

from __future__ import annotations

import contextlib
import logging
import shlex
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harbor.environments.capabilities import EnvironmentCapabilities
from harbor.models.task.config import NetworkMode

MAIN_SERVICE_NAME = "main"


@dataclass
class ExecResult:
    stdout: str | None = None
    stderr: str | None = None
    return_code: int = 0


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
        self._persistent_env = dict(persistent_env or {})
        self._mounts = list(mounts or [])
        self.network_policy = network_policy
        if not self._uses_compose:
            self._persistent_env.update(task_env_config.env or {})
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

    async def ensure_dirs(self, dirs: list[str], *, chmod: bool = True) -> None:
        if not dirs:
            return
        quoted = " ".join(shlex.quote(d) for d in dirs)
        cmd = f"mkdir -p {quoted}" + (f" && chmod 777 {quoted}" if chmod else "")
        r = await self.exec(cmd, user="root")
        if r.return_code != 0:
            raise RuntimeError(f"ensure_dirs failed: {r.stderr}")

    async def is_dir(self, path: str, user: str | int | None = None) -> bool:
        return (await self.exec(f"test -d {shlex.quote(path)}", user=user)).return_code == 0

    async def is_file(self, path: str, user: str | int | None = None) -> bool:
        return (await self.exec(f"test -f {shlex.quote(path)}", user=user)).return_code == 0

    async def _upload_environment_dir_after_start(self) -> None:
        return None

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
