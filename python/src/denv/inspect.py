"""Inspect AI's ``sandbox="denv"``: a SandboxEnvironment over denv.

    from inspect_ai import Task, eval
    Task(..., sandbox=("denv", "compose.yaml"))     # or sandbox="denv" with a compose.yaml beside the task

Each sample gets a fork of the deployed compose file (about a second, whatever the data), so
samples never see each other's state; the default service is the one marked ``x-default: true``,
else the one named ``default``. Commands run as the service's own user (``user:``), which should
not be root; ``user="root"`` is allowed per call. The server and key come from ``DENV_SERVER`` and
``DENV_API_KEY`` (or ``denv login``).

This module is a thin subclass of Inspect's base class over :mod:`denv._inspect_core`; importing it
without ``inspect_ai`` installed raises an ImportError that says ``pip install 'denv[inspect]'``.
"""

from __future__ import annotations

from typing import Any, Literal, Union, overload

from .errors import FrameworkMissingError

try:
    from inspect_ai.util import (
        ExecResult,
        OutputLimitExceededError,
        SandboxEnvironment,
        SandboxEnvironmentConfigType,
        SandboxEnvironmentLimits,
    )
except ImportError as e:  # pragma: no cover - exercised by the missing-framework test
    raise FrameworkMissingError("inspect_ai", "inspect_ai.util", "inspect") from e

try:  # newer Inspect (2026-08): a dead sandbox is its own error type
    from inspect_ai.util import SandboxUnavailableError as _Unavailable
except ImportError:  # older Inspect: a RuntimeError is what it would have seen
    _Unavailable = RuntimeError  # type: ignore[assignment,misc]

from ._compose import COMPOSE_NAMES
from ._inspect_core import InspectCore, InspectSandboxOps, log, to_thread
from ._session import Session

_core = InspectCore()


class DenvSandboxEnvironment(SandboxEnvironment):
    """One service of one per-sample fork."""

    def __init__(self, env_id: str, env_name: str, service: str) -> None:
        super().__init__()  # Inspect's exec_remote and tool injection read attributes it sets
        self.env_id = env_id
        self.env_name = env_name
        self.service = service
        self._ops = InspectSandboxOps(
            Session(_core.client, env_id, service),
            output_limit_error=lambda limit, out: OutputLimitExceededError(limit, out),
            unavailable_error=lambda msg: _Unavailable(msg),
        )

    # --- the contract ---------------------------------------------------------------------------

    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,
        timeout_retry: bool = True,
        concurrency: bool = True,
    ) -> ExecResult[str]:
        # timeout_retry: denv's exec does not flake the way a local daemon can, so there is nothing
        # to retry; concurrency throttles local subprocesses, and this one is remote.
        r = await self._ops.exec(
            cmd,
            input,
            cwd,
            env,
            user,
            timeout,
            max_output_bytes=SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE,
            max_output_str=SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR,
        )
        return ExecResult(success=r.success, returncode=r.returncode, stdout=r.stdout, stderr=r.stderr)

    async def write_file(self, file: str, contents: str | bytes) -> None:
        await self._ops.write_file(file, contents)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> Union[str | bytes]:
        # The limit is a ContextVar-backed value: read it at each call, never cache it.
        return await self._ops.read_file(
            file,
            text,
            limit_bytes=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE,
            limit_str=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR,
        )

    async def verify(self) -> dict[str, Any]:
        """Grades this sample with the compose file's x-denv.verifier (denv verify): the agent's
        processes are stopped, the declared paths collected root-side (links and special files
        refused), and the grader runs on a fork. Returns {reward, reason, exit_code, agent}."""
        return await to_thread(_core.verify, self.env_id)

    def default_polling_interval(self) -> float:
        return 0.2

    # --- lifecycle ------------------------------------------------------------------------------

    @classmethod
    def config_files(cls) -> list[str]:
        return list(COMPOSE_NAMES)

    @classmethod
    def default_concurrency(cls) -> int | None:
        return None

    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        # Deploys once (pull, pin, start, warm, snapshot); every sample then forks the result.
        await to_thread(_core.ensure_base, config)

    @classmethod
    async def sample_init(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        metadata: dict[str, str],
    ) -> dict[str, SandboxEnvironment]:
        fork, default, _compose = await to_thread(_core.sample_init, task_name, config, metadata)
        services = [default, *(s for s in fork["services"] if s != default)]
        return {s: cls(fork["id"], fork["name"], s) for s in services}

    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        ids = {e.env_id for e in environments.values() if isinstance(e, DenvSandboxEnvironment)}
        for env_id in ids:
            await to_thread(_core.destroy, env_id)

    @classmethod
    async def task_cleanup(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool
    ) -> None:
        left = await to_thread(_core.task_cleanup, cleanup)
        if left:
            log(f"left running: {', '.join(left)}; remove them with `denv env destroy NAME` "
                "or `inspect sandbox cleanup denv`")

    @classmethod
    async def cli_cleanup(cls, id: str | None) -> None:
        gone = await to_thread(_core.cli_cleanup, id)
        log(f"destroyed {len(gone)} environment(s)")

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> Any:
        # Configs arrive as compose paths or Inspect's ComposeConfig; a dict is a compose mapping.
        return config


def core() -> InspectCore:
    """The process-wide core (tests point it at a live server)."""
    return _core
