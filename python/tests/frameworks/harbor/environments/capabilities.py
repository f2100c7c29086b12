"""Stand-in for harbor.environments.capabilities (see ../../README.md)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class EnvironmentCapabilities:
    gpus: bool = False
    tpus: bool = False
    disable_internet: bool = False
    network_allowlist: bool = False
    dynamic_network_policy: bool = False
    windows: bool = False
    mounted: bool = False
    docker_compose: bool = False


@dataclass(frozen=True)
class EnvironmentResourceCapabilities:
    cpu_limit: bool = False
    cpu_request: bool = False
    memory_limit: bool = False
    memory_request: bool = False
