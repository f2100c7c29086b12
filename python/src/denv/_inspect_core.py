"""Inspect's sandbox contract on denv, without Inspect: what ``denv.inspect`` delegates to.

The lifecycle maps onto denv's own: ``task_init`` deploys the compose file once (the deploy ends in
a version: images pinned, volumes snapshotted); ``sample_init`` forks that version per sample, so a
sample starts from the same state in about a second whatever the data; ``sample_cleanup`` destroys
the fork. Exceptions follow Inspect's docstrings (TimeoutError, PermissionError, ...); the
framework-specific ones (OutputLimitExceededError, SandboxUnavailableError) come from the caller.
"""

from __future__ import annotations

import asyncio
import secrets
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._bases import ensure_base, verdict
from ._compose import default_service, load_compose, project_name, with_denv_block
from ._session import FileTooLargeError, SandboxGoneError, Session
from .client import Client, Environment
from .errors import DenvError


async def to_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Runs blocking client calls off the event loop (anyio's thread pool under Inspect)."""
    try:
        import anyio.to_thread

        return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))
    except ImportError:
        return await asyncio.to_thread(fn, *args, **kwargs)


@dataclass
class _Base:
    """One deployed compose file: the environment every sample forks."""

    project: str
    env: Environment
    compose: str


@dataclass
class InspectCore:
    """Process-wide state: which compose files are deployed, which forks are alive."""

    client_factory: Callable[[], Client] = Client
    _client: Client | None = None
    _bases: dict[str, _Base] = field(default_factory=dict)
    _live: dict[str, str] = field(default_factory=dict)  # env id -> name, forks not yet destroyed
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = self.client_factory()
        return self._client

    # --- lifecycle ----------------------------------------------------------------------------

    def _compose(self, config: Any, metadata: dict[str, str] | None = None) -> tuple[str, str]:
        """The compose text (marked as a denv project) and the .env its interpolation needs."""
        text = with_denv_block(load_compose(config))
        # SAMPLE_METADATA_<KEY> interpolation, as Inspect's docker sandbox does: the values go in
        # the project's .env, and the project name covers them (each distinct set deploys once).
        used = {k: v for k, v in sample_metadata_env(metadata or {}).items() if k in text}
        return text, "".join(f"{k}={_dotenv_quote(v)}\n" for k, v in sorted(used.items()))

    def ensure_base(self, config: Any, metadata: dict[str, str] | None = None) -> _Base:
        compose, dotenv = self._compose(config, metadata)
        # Deployed once per process: later samples fork it without asking the server again.
        cached = self._bases.get(project_name("inspect", compose, dotenv))
        if cached:
            return cached
        project, env = ensure_base(self.client, "inspect", compose, dotenv)
        with self._lock:
            base = _Base(project=project, env=env, compose=compose)
            self._bases[project] = base
            return base

    def sample_init(self, task_name: str, config: Any, metadata: dict[str, str]) -> tuple[Environment, str, str]:
        """Forks the base; returns the fork, the default service, and the compose text."""
        base = self.ensure_base(config, metadata)
        name = _env_name(task_name)
        fork = self.client.fork(base.env["id"], name)
        with self._lock:
            self._live[fork["id"]] = fork["name"]
        return fork, default_service(base.compose, fork["services"]), base.compose

    def verify(self, env_id: str) -> dict[str, Any]:
        """denv verify on a sample's environment: graded on a fork as a separate principal."""
        return verdict(self.client.verify(env_id))

    def destroy(self, env_id: str) -> None:
        """Idempotent: an environment already gone is fine."""
        with self._lock:
            self._live.pop(env_id, None)
        try:
            self.client.destroy(env_id)
        except DenvError as e:
            if e.code != "not_found":
                raise

    def task_cleanup(self, cleanup: bool) -> list[str]:
        """Destroys what is left (forks, then bases) when cleanup; otherwise lists it."""
        with self._lock:
            live = dict(self._live)
            bases = list(self._bases.values())
        if not cleanup:
            return [*live.values(), *(f"{b.project}/base" for b in bases)]
        for env_id in live:
            self.destroy(env_id)
        for b in bases:
            self.destroy(b.env["id"])
        with self._lock:
            self._bases.clear()
        return []

    def cli_cleanup(self, env: str | None) -> list[str]:
        """``inspect sandbox cleanup denv [id]``: one environment, or every Inspect one."""
        if env:
            self.destroy(env)
            return [env]
        gone = []
        for e in self.client.envs():
            if e["project"].startswith("inspect-"):
                self.destroy(e["id"])
                gone.append(e["name"])
        return gone


def sample_metadata_env(metadata: dict[str, Any]) -> dict[str, str]:
    """Inspect's convention: metadata key ``memory_limit`` is ``SAMPLE_METADATA_MEMORY_LIMIT``."""
    out = {}
    for k, v in metadata.items():
        key = "SAMPLE_METADATA_" + "".join(ch if ch.isalnum() else "_" for ch in str(k)).upper()
        out[key] = str(v)
    return out


def _dotenv_quote(v: str) -> str:
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _env_name(task_name: str) -> str:
    stem = "".join(ch if ch.isalnum() else "-" for ch in task_name.lower())[:20].strip("-") or "task"
    return f"i-{stem}-{secrets.token_hex(4)}"


# --- per-environment operations -------------------------------------------------------------------


@dataclass
class ExecAnswer:
    success: bool
    returncode: int
    stdout: str
    stderr: str


class InspectSandboxOps:
    """exec/read_file/write_file with Inspect's semantics over one service's Session."""

    def __init__(
        self,
        session: Session,
        *,
        output_limit_error: Callable[[str, str | None], Exception],
        unavailable_error: Callable[[str], Exception],
    ) -> None:
        self.session = session
        self._limit_error = output_limit_error
        self._unavailable = unavailable_error

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None,
        cwd: str | None,
        env: dict[str, str] | None,
        user: str | None,
        timeout: int | None,
        *,
        max_output_bytes: int,
        max_output_str: str,
    ) -> ExecAnswer:
        if not cmd:
            raise ValueError("cmd is empty")
        try:
            r = await to_thread(
                self.session.exec,
                list(cmd),
                stdin=input,
                cwd=cwd,
                env_vars=env or None,
                user=user,
                timeout_s=timeout,
                max_output_bytes=min(max_output_bytes, 64 * 1024 * 1024),
            )
        except SandboxGoneError as e:
            raise self._unavailable(str(e)) from e
        stdout = r.stdout.decode("utf-8", errors="replace")
        stderr = r.stderr.decode("utf-8", errors="replace")
        if r.timed_out:
            err = TimeoutError(f"Command timed out after {timeout} seconds: {cmd[0]}")
            # Inspect's proxy copies this onto its SandboxTimeoutError (partial output).
            err.truncated_output = stdout  # type: ignore[attr-defined]
            raise err
        if r.stdout_truncated or r.stderr_truncated:
            raise self._limit_error(max_output_str, stdout if r.stdout_truncated else stderr)
        if r.exit_code == 126 and "Permission denied" in stderr:
            raise PermissionError(f"Permission denied executing {cmd[0]}: {stderr.strip()}")
        return ExecAnswer(r.exit_code == 0, r.exit_code, stdout, stderr)

    async def write_file(self, file: str, contents: str | bytes) -> None:
        data = contents.encode("utf-8") if isinstance(contents, str) else bytes(contents)
        try:
            await to_thread(self.session.write_file, file, data)
        except SandboxGoneError as e:
            raise self._unavailable(str(e)) from e

    async def read_file(self, file: str, text: bool, *, limit_bytes: int, limit_str: str) -> str | bytes:
        try:
            data = await to_thread(self.session.read_file, file, limit_bytes=limit_bytes)
        except FileTooLargeError:
            raise self._limit_error(limit_str, None) from None
        except SandboxGoneError as e:
            raise self._unavailable(str(e)) from e
        # Newlines stay as they are (CRLF stays CRLF): bytes are decoded, never re-read as text.
        return data.decode("utf-8") if text else data


def log(msg: str) -> None:
    print(f"denv: {msg}", file=sys.stderr)
