"""Stand-in for harbor.environments.capabilities (see ../../README.md): frozen pydantic models,
constructed by keyword only."""

from _kwmodel import KwModel


class EnvironmentCapabilities(KwModel, frozen=True):
    gpus: bool = False
    tpus: bool = False
    disable_internet: bool = False
    network_allowlist: bool = False
    dynamic_network_policy: bool = False
    windows: bool = False
    mounted: bool = False
    docker_compose: bool = False


class EnvironmentResourceCapabilities(KwModel, frozen=True):
    cpu_limit: bool = False
    cpu_request: bool = False
    memory_limit: bool = False
    memory_request: bool = False
