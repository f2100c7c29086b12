"""Stand-in for harbor.models.task.config: the task's [environment] section (see ../../../README.md)."""

from dataclasses import dataclass, field
from enum import Enum


class NetworkMode(str, Enum):
    PUBLIC = "public"
    NO_NETWORK = "no-network"
    ALLOWLIST = "allowlist"


@dataclass
class NetworkPolicy:
    network_mode: NetworkMode = NetworkMode.PUBLIC
    allowed_hosts: list[str] | None = None


@dataclass
class EnvironmentConfig:
    build_timeout_sec: float = 600.0
    docker_image: str | None = None
    os: str = "linux"
    cpus: int | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    gpus: int | None = None
    network_mode: NetworkMode = NetworkMode.PUBLIC
    allowed_hosts: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
