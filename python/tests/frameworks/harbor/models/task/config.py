"""Stand-in for harbor.models.task.config: the task's [environment] section (see ../../../README.md).
Like Harbor's, these are pydantic models: constructed by keyword only."""

from enum import Enum

from _kwmodel import KwModel


class NetworkMode(str, Enum):
    PUBLIC = "public"
    NO_NETWORK = "no-network"
    ALLOWLIST = "allowlist"


class NetworkPolicy(KwModel):
    network_mode: NetworkMode = NetworkMode.PUBLIC
    allowed_hosts: list[str] | None = None


class EnvironmentConfig(KwModel):
    build_timeout_sec: float = 600.0
    docker_image: str | None = None
    os: str = "linux"
    cpus: int | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    gpus: int | None = None
    network_mode: NetworkMode = NetworkMode.PUBLIC
    allowed_hosts: list[str] | None = None
    env: dict[str, str] = {}  # noqa: RUF012 (copied per instance, as pydantic does)
    workdir: str | None = None
