from .providers import ContainerProvider

__all__ = ["ContainerProvider"]
