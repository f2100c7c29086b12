"""OpenEnv's container provider on denv, without OpenEnv: what ``denv.openenv`` delegates to.

One provider instance is one denv environment: a sandbox from an image (the OpenEnv server image;
its CMD serves port 8000), a fork of a version, or a fork of an environment. The base URL it returns
is a denv port URL: the token in its path is the only credential (OpenEnv clients connect with the
URL alone, over HTTP and the /ws upgrade), relayed through the host's outbound connection. Treat
it as a secret and do not log it; it stops working when the environment is destroyed.
"""

from __future__ import annotations

import secrets
import time
import urllib.error
import urllib.request
from typing import Any

from .client import Client, Environment
from .errors import DenvError

CONTAINER_PORT = 8000


class ProviderCore:
    def __init__(
        self,
        source: str | None = None,
        *,
        server: str | None = None,
        api_key: str | None = None,
        egress: str = "deny",
        container_port: int = CONTAINER_PORT,
    ) -> None:
        self.source = source
        self.egress = egress
        self.container_port = container_port
        self._server, self._api_key = server, api_key
        self._client: Client | None = None
        self.env: Environment | None = None
        self.base_url: str | None = None
        self._wait_timeout_s: float | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self._server, self._api_key)
        return self._client

    def start(self, image: str | None, env_vars: dict[str, str] | None, kwargs: dict[str, Any]) -> str:
        if self.env is not None:
            raise RuntimeError(
                f"this provider already runs environment {self.env['name']}; stop_container() first "
                "(one provider instance manages one environment)"
            )
        source = image or self.source
        if not source:
            raise ValueError(
                "no source: pass an image to start_container(), or construct DenvProvider(source) with an "
                "image reference, 'version:ver_…' or 'env:NAME'"
            )
        wait = kwargs.get("wait_timeout")
        if isinstance(wait, (int, float)) and wait > 0:
            self._wait_timeout_s = float(wait)
        name = f"oe-{secrets.token_hex(4)}"
        c = self.client
        try:
            if source.startswith("version:") or source.startswith("ver_"):
                env = c.sandbox(from_version=source.removeprefix("version:"), name=name)
            elif source.startswith("env:"):
                env = c.fork(source.removeprefix("env:"), name)
            else:
                env = c.sandbox(image=source, env_vars=env_vars or None, ports=[self.container_port], egress=self.egress, name=name)
        except DenvError as e:
            self._remove(name)  # a failed start leaves nothing behind
            raise RuntimeError(f"denv could not start {source}: {e.message}") from e
        self.env = env
        try:
            r = c.api.envs.open_port(env["id"], str(self.container_port), {})
        except DenvError as e:
            self.stop()
            raise RuntimeError(f"denv could not expose port {self.container_port}: {e.message}") from e
        self.base_url = str(r["url"])
        return self.base_url

    def _remove(self, name: str) -> None:
        try:
            self.client.destroy(name)
        except DenvError:
            pass

    def wait_for_ready(self, base_url: str, timeout_s: float | None) -> None:
        limit = timeout_s or self._wait_timeout_s or 30.0
        deadline = time.monotonic() + limit
        last = "no answer yet"
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{base_url.rstrip('/')}/health", timeout=2) as res:
                    if res.status == 200:
                        return
                    last = f"HTTP {res.status}"
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}"
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                last = str(getattr(e, "reason", e))
            time.sleep(0.25)
        raise TimeoutError(f"the environment's /health did not answer 200 within {limit:g} s ({last})")

    def stop(self) -> None:
        """Idempotent: a second call, or a call after a failed start, does nothing."""
        env, self.env, self.base_url = self.env, None, None
        if env is None:
            return
        try:
            self.client.destroy(env["id"])
        except DenvError as e:
            if e.code != "not_found":
                raise

    # --- orchestration (never exposed to the agent; RFC 002 invariant 6) ------------------------

    def snapshot(self) -> str:
        if self.env is None:
            raise RuntimeError("the provider has no running environment")
        d = self.client.snapshot(self.env["id"])
        return str(d["version_id"])

    def verify(self) -> dict[str, Any]:
        from ._bases import verdict

        if self.env is None:
            raise RuntimeError("the provider has no running environment")
        return verdict(self.client.verify(self.env["id"]))
