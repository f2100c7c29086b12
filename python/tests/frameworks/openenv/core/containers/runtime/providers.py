"""Stand-in for openenv.core.containers.runtime.providers (see ../../../../README.md): the image is a
required argument of start_container, and the base class has no context-manager protocol."""

from abc import ABC, abstractmethod
from typing import Any, Dict, Optional


class ContainerProvider(ABC):
    @abstractmethod
    def start_container(self, image: str, port: Optional[int] = None,
                        env_vars: Optional[Dict[str, str]] = None, **kwargs: Any) -> str: ...

    @abstractmethod
    def stop_container(self) -> None: ...

    @abstractmethod
    def wait_for_ready(self, base_url: str, timeout_s: float = 30.0) -> None: ...
