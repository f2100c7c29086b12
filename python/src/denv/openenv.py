"""OpenEnv's ``provider=DenvProvider(...)``: environments run on your denv hosts.

    from denv.openenv import DenvProvider
    provider = DenvProvider("registry.example.com/echo-env@sha256:…")   # or "version:ver_…", "env:NAME"
    client = EchoEnv(provider=provider)           # OpenEnv starts it on first connect
    # or: EchoEnv.from_docker_image(None, provider=provider)

The source is stored at construction, so ``start_container()`` may be called with no image (as
OpenEnv's provider-owned startup does; OpenEnv's own signature requires one, and one passed wins);
``with DenvProvider(...) as p:`` destroys the environment at the end of the block; extra keyword arguments (``wait_timeout``, …) are accepted,
``wait_timeout`` is honoured by ``wait_for_ready``. The returned base URL is a denv port URL for
port 8000: a bearer capability, HTTP and the ``/ws`` upgrade both work through it; it is https when
the denv server is. ``snapshot()`` and ``verify()`` are orchestration methods, never tools.
"""

from __future__ import annotations

from typing import Any

from .errors import FrameworkMissingError

try:
    from openenv.core.containers.runtime import ContainerProvider
except ImportError as e:  # pragma: no cover - exercised by the missing-framework test
    raise FrameworkMissingError("openenv", "openenv.core.containers.runtime", "openenv") from e

from ._openenv_core import CONTAINER_PORT, ProviderCore


class DenvProvider(ContainerProvider):
    def __init__(
        self,
        source: str | None = None,
        *,
        server: str | None = None,
        api_key: str | None = None,
        egress: str = "deny",
        container_port: int = CONTAINER_PORT,
    ) -> None:
        self._core = ProviderCore(source, server=server, api_key=api_key, egress=egress, container_port=container_port)

    def start_container(
        self,
        image: str | None = None,
        port: int | None = None,
        env_vars: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> str:
        # `port` is the host side in Docker's provider; here nothing is published on a host, so
        # it is accepted and has no effect (the container side is container_port, 8000).
        return self._core.start(image, env_vars, kwargs)

    def stop_container(self) -> None:
        self._core.stop()

    def wait_for_ready(self, base_url: str, timeout_s: float | None = None) -> None:
        self._core.wait_for_ready(base_url, timeout_s)

    def close(self) -> None:
        self._core.stop()

    # OpenEnv's ContainerProvider has no context-manager protocol of its own: this one's `with`
    # destroys what the block started.
    def __enter__(self) -> DenvProvider:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def snapshot(self) -> str:
        return self._core.snapshot()

    def verify(self) -> dict[str, Any]:
        return self._core.verify()

    @property
    def environment(self) -> str | None:
        return self._core.env["name"] if self._core.env else None
