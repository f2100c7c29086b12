"""Harbor's environment on denv: ``denv.harbor:DenvEnvironment``.

Harbor's ``-e/--env`` accepts only its built-in environment names, so a third-party environment
is selected by import path::

    harbor run -p tasks/ -a oracle \\
        --environment-import-path denv.harbor:DenvEnvironment \\
        --ek server=https://denv.example.com --ek fork_from=ops-world/alpha

or in a job file: ``environment: {import_path: "denv.harbor:DenvEnvironment", kwargs: {...}}``.
Keyword arguments: ``server`` and ``api_key`` (else DENV_SERVER / DENV_API_KEY or ``denv login``),
``fork_from`` (an environment name or version id every trial forks). Without ``fork_from`` an
environment directory with a Dockerfile or a compose file is deployed once (denv builds the image on
its host) and forked per trial, read as ``denv import harbor`` reads it; ``[environment].docker_image``
alone runs as a sandbox. A separate verifier's ``tests/`` is such a directory too.

Beyond Harbor's interface: ``snapshot()`` returns a version id and ``verify()`` grades the trial
with denv verify (on a fork, as a separate principal).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from .errors import FrameworkMissingError

try:
    from harbor.environments.base import BaseEnvironment, ExecResult
    from harbor.environments.capabilities import EnvironmentCapabilities
except ImportError as e:  # pragma: no cover - exercised by the missing-framework test
    raise FrameworkMissingError("harbor", "harbor.environments.base", "harbor") from e

from ._harbor_core import MAIN, HarborCore


# The [environment] fields that decide what the directory deploys (the rest are Harbor's own).
_CONFIG_FIELDS = ("docker_image", "workdir", "cpus", "memory_mb", "env", "healthcheck")


def _config_of(task_env_config: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k in _CONFIG_FIELDS:
        v = getattr(task_env_config, k, None)
        dump = getattr(v, "model_dump", None)
        out[k] = dump(mode="json") if callable(dump) else v
    return {k: v for k, v in out.items() if v not in (None, {}, [])}


class DenvEnvironment(BaseEnvironment):
    def __init__(self, environment_dir, environment_name, session_id, trial_paths, task_env_config,  # noqa: ANN001
                 *args: Any, server: str | None = None, api_key: str | None = None,
                 fork_from: str | None = None, **kwargs: Any) -> None:
        # Harbor's constructor reads capabilities and calls _validate_definition before it returns,
        # so everything they depend on is set first.
        policy = kwargs.get("network_policy")
        mode = getattr(getattr(policy, "network_mode", None), "value", getattr(policy, "network_mode", None))
        task_mode = getattr(getattr(task_env_config, "network_mode", None), "value", None)
        self._core = HarborCore(
            environment_dir=Path(environment_dir),
            session_id=session_id,
            docker_image=getattr(task_env_config, "docker_image", None),
            workdir=getattr(task_env_config, "workdir", None),
            no_network=(mode or task_mode) == "no-network",
            server=server,
            api_key=api_key,
            fork_from=fork_from,
            config=_config_of(task_env_config),
        )
        super().__init__(environment_dir, environment_name, session_id, trial_paths, task_env_config,
                         *args, **kwargs)

    @staticmethod
    def type() -> str:
        return "denv"

    @classmethod
    def preflight(cls) -> None:
        """Harbor calls this once before queueing trials: the server must answer and take the key."""
        from .client import Client
        from .errors import DenvError

        try:
            Client().projects()
        except DenvError as e:
            raise SystemExit(f"denv: {e.message} (set DENV_SERVER and DENV_API_KEY, or run `denv login`)") from None

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        # Honest: egress deny is enforced and verified; allowlists, GPUs and host mounts are not
        # offered; compose stacks are, with the per-service operations below.
        return EnvironmentCapabilities(disable_internet=True, docker_compose=True, mounted=False)

    @property
    def _uses_compose(self) -> bool:
        return self._core.uses_compose

    def _validate_definition(self) -> None:
        self._core.validate_definition()

    async def start(self, force_build: bool) -> None:
        await asyncio.to_thread(self._core.start)
        # Harbor's mounts are host directories; remotely they are only directories to create.
        targets = getattr(self, "_mount_targets", None)
        if callable(targets):
            # Harbor's ensure_dirs answers with a result rather than raising.
            r = await self.ensure_dirs(targets(writable_only=True))
            if r is not None and getattr(r, "return_code", 0) != 0:
                raise RuntimeError(f"could not make the trial's directories: {(r.stderr or '').strip()}")
        await self._upload_environment_dir_after_start()

    async def stop(self, delete: bool) -> None:
        kept = await asyncio.to_thread(self._core.stop, delete)
        if kept:
            self.logger.info("denv environment %s kept; `denv env destroy %s` removes it", kept, kept)

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        return await self.service_exec(command, service=None, cwd=cwd, env=env, timeout_sec=timeout_sec, user=user)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        await asyncio.to_thread(self._core.upload_file, Path(source_path), target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        await asyncio.to_thread(self._core.upload_dir, Path(source_dir), target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        await self.service_download_file(source_path, target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        await self.service_download_dir(source_dir, target_dir)

    # --- per-service operations (compose contract) ------------------------------------------------

    async def service_exec(self, command: str, *, service: str | None = None, cwd: str | None = None,
                           env: dict[str, str] | None = None, timeout_sec: int | None = None,
                           user: str | int | None = None) -> ExecResult:
        main = service in (None, MAIN)
        r = await asyncio.to_thread(
            self._core.exec,
            command,
            service=service,
            cwd=cwd,
            env=self._merge_env(env) if main else env,
            timeout_sec=timeout_sec,
            user=self._resolve_user(user) if main else user,
        )
        return ExecResult(stdout=r.stdout, stderr=r.stderr, return_code=r.return_code)

    async def service_download_file(self, source_path: str, target_path: Path | str, *,
                                    service: str | None = None) -> None:
        await asyncio.to_thread(self._core.download_file, source_path, Path(target_path), service)

    async def service_download_dir(self, source_dir: str, target_dir: Path | str, *,
                                   service: str | None = None) -> None:
        skipped = await asyncio.to_thread(self._core.download_dir, source_dir, Path(target_dir), service)
        if skipped:
            self.logger.warning("not downloaded (links or special files): %s", ", ".join(skipped))

    # is_dir / is_file answer from denv's stat (as the user, links reported, never followed), not a
    # shell's test.

    async def is_dir(self, path: str, user: str | int | None = None) -> bool:
        return await self.service_is_dir(path, service=None, user=user)

    async def is_file(self, path: str, user: str | int | None = None) -> bool:
        entry = await asyncio.to_thread(self._core.stat, path, None, self._user_of(user, None))
        return entry is not None and entry["type"] == "file"

    async def service_is_dir(self, path: str, *, service: str | None = None, user: str | int | None = None) -> bool:
        entry = await asyncio.to_thread(self._core.stat, path, service, self._user_of(user, service))
        return entry is not None and entry["type"] == "directory"

    def _user_of(self, user: str | int | None, service: str | None) -> str | None:
        u = self._resolve_user(user) if service in (None, MAIN) else user
        return None if u is None else str(u)

    async def stop_service(self, service: str) -> None:
        await asyncio.to_thread(self._core.stop_service, service)

    # --- denv's own -------------------------------------------------------------------------------

    async def snapshot(self) -> str:
        return await asyncio.to_thread(self._core.snapshot)

    async def verify(self) -> dict[str, Any]:
        return await asyncio.to_thread(self._core.verify)

    @property
    def denv_environment(self) -> str | None:
        return self._core.env["name"] if self._core.env else None
