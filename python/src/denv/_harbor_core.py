"""Harbor's environment contract on denv, without Harbor: what ``denv.harbor`` delegates to.

One trial is one denv environment. Where it comes from, in order: ``fork_from`` (an environment
or a version: the trial starts from that exact state), the task's ``environment/docker-compose.yaml``
(deployed once per content, then forked per trial), or ``[environment].docker_image`` (a one-
container sandbox). denv does not build images yet, so a task with only a Dockerfile is refused.
"""

from __future__ import annotations

import os
import posixpath
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._bases import ensure_base, verdict
from ._compose import COMPOSE_NAMES, with_denv_block
from ._session import SandboxGoneError, Session
from .client import Client, Environment
from .errors import DenvError

MAIN = "main"


@dataclass
class HarborExec:
    stdout: str
    stderr: str
    return_code: int


def compose_file(environment_dir: Path) -> Path | None:
    for name in COMPOSE_NAMES:
        if (environment_dir / name).is_file():
            return environment_dir / name
    return None


class HarborCore:
    def __init__(
        self,
        *,
        environment_dir: Path,
        session_id: str,
        docker_image: str | None,
        workdir: str | None,
        no_network: bool,
        server: str | None = None,
        api_key: str | None = None,
        fork_from: str | None = None,
    ) -> None:
        self.environment_dir = environment_dir
        self.session_id = session_id
        self.docker_image = docker_image
        self.workdir = workdir
        self.no_network = no_network
        self.fork_from = fork_from
        self._server, self._api_key = server, api_key
        self._client: Client | None = None
        self.env: Environment | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self._server, self._api_key)
        return self._client

    def validate_definition(self) -> None:
        if self.fork_from or self.docker_image or compose_file(self.environment_dir):
            return
        if (self.environment_dir / "Dockerfile").is_file():
            raise FileNotFoundError(
                f"{self.environment_dir}: denv runs pinned images and does not build them yet; set "
                "[environment].docker_image (e.g. the image built from this Dockerfile, pushed to a "
                "registry the denv host can pull) or pass --ek fork_from=<environment or version>"
            )
        raise FileNotFoundError(
            f"{self.environment_dir}: no docker-compose.yaml, no [environment].docker_image and no "
            "fork_from: denv has nothing to run"
        )

    @property
    def uses_compose(self) -> bool:
        return not self.fork_from and compose_file(self.environment_dir) is not None

    # --- lifecycle ----------------------------------------------------------------------------

    def start(self) -> Environment:
        c = self.client
        name = _env_name(self.session_id)
        egress = "deny" if self.no_network else "allow"
        if self.fork_from:
            if self.fork_from.startswith("ver_"):
                self.env = c.sandbox(from_version=self.fork_from, name=name)
            else:
                self.env = c.fork(self.fork_from, name)
        elif self.uses_compose:
            path = compose_file(self.environment_dir)
            assert path is not None
            compose = with_denv_block(path.read_text(encoding="utf-8"), egress=egress)
            _project, base = ensure_base(c, "harbor", compose)
            self.env = c.fork(base["id"], name)
        else:
            assert self.docker_image
            # Harbor overrides the image's command with `sleep infinity`; the workdir keeps files
            # across snapshot and fork.
            self.env = c.sandbox(
                image=self.docker_image,
                cmd=["sh", "-c", "sleep infinity"],
                egress=egress,
                volumes=[self.workdir] if self.workdir else None,
                name=name,
            )
        return self.env

    def stop(self, delete: bool) -> str | None:
        """Destroys the environment; with delete=False it is kept and its name returned."""
        if self.env is None:
            return None
        if not delete:
            return self.env["name"]
        try:
            self.client.destroy(self.env["id"])
        except DenvError as e:
            if e.code != "not_found":
                raise
        self.env = None
        return None

    def _service(self, service: str | None) -> str | None:
        """Harbor names the agent's container `main`; denv's default service is the same when the
        environment is an image sandbox (its only service is `main`)."""
        if self.env is None:
            raise RuntimeError("the environment is not started")
        if service is None or service == MAIN:
            return MAIN if MAIN in self.env["services"] else None
        if service not in self.env["services"]:
            raise ValueError(f"no service {service!r}; this environment has {', '.join(self.env['services'])}")
        return service

    def session(self, service: str | None = None) -> Session:
        assert self.env is not None
        return Session(self.client, self.env["id"], self._service(service))

    # --- exec ---------------------------------------------------------------------------------

    def exec(
        self,
        command: str,
        *,
        service: str | None = None,
        cwd: str | None,
        env: dict[str, str] | None,
        timeout_sec: float | None,
        user: str | int | None,
    ) -> HarborExec:
        try:
            r = self.session(service).exec(
                ["bash", "-c", command],
                cwd=cwd or self.workdir,
                env_vars=env,
                user=None if user is None else str(user),
                timeout_s=timeout_sec,
            )
        except SandboxGoneError as e:
            raise RuntimeError(str(e)) from e
        if r.timed_out:
            raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
        return HarborExec(
            stdout=r.stdout.decode("utf-8", errors="replace"),
            stderr=r.stderr.decode("utf-8", errors="replace"),
            return_code=r.exit_code,
        )

    def stop_service(self, service: str) -> None:
        assert self.env is not None
        svc = self._service(service)
        self.client._json("POST", f"/v1/envs/{self.env['id']}/services/{svc or MAIN}/stop")

    # --- files --------------------------------------------------------------------------------

    # Harbor's own environments copy files in and out as root (docker cp), keeping the tar's owners:
    # so do these, through denv's files API (which makes missing parents itself).

    # Tars are spooled to a temporary file past 8 MiB and streamed both ways: a trial's logs or
    # data of any size cost little memory.

    def upload_file(self, source: Path, target: str, service: str | None = None) -> None:
        target = self._abs(target)
        with tempfile.SpooledTemporaryFile(max_size=8 << 20) as buf:
            with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
                tf.add(str(source), arcname=posixpath.basename(target), recursive=False, filter=_as_root)
            buf.seek(0)
            assert self.env is not None
            self.client.put_tar(
                self.env["id"], posixpath.dirname(target) or "/", buf, service=self._service(service), user="root"
            )

    def upload_dir(self, source: Path, target: str, service: str | None = None) -> None:
        target = self._abs(target)
        with tempfile.SpooledTemporaryFile(max_size=8 << 20) as buf:
            with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
                for entry in sorted(Path(source).iterdir()):
                    tf.add(str(entry), arcname=entry.name, filter=_as_root)
            buf.seek(0)
            assert self.env is not None
            self.client.put_tar(self.env["id"], target, buf, service=self._service(service), user="root")

    def download_file(self, source: str, target: Path, service: str | None = None) -> None:
        assert self.env is not None
        res = self.client.get_tar_stream(self.env["id"], self._abs(source), service=self._service(service), user="root")
        with res, tarfile.open(fileobj=res, mode="r|") as tf:
            for m in tf:
                if m.isfile():
                    f = tf.extractfile(m)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with open(target, "wb") as out:
                        while f is not None and (chunk := f.read(1 << 20)):
                            out.write(chunk)
                    return
        raise FileNotFoundError(f"{source} is not a regular file")

    def download_dir(self, source: str, target: Path, service: str | None = None) -> list[str]:
        """Extracts regular files and directories only (overwriting); links and special files are
        skipped and returned, so nothing in the sandbox can make this write outside ``target``."""
        assert self.env is not None
        res = self.client.get_tar_stream(self.env["id"], self._abs(source), service=self._service(service), user="root")
        target = Path(target)
        target.mkdir(parents=True, exist_ok=True)
        skipped: list[str] = []
        root = target.resolve()
        with res, tarfile.open(fileobj=res, mode="r|") as tf:
            for m in tf:
                parts = Path(m.name).parts[1:]  # the archive's first component is the directory itself
                if not parts:
                    continue
                rel = Path(*parts)
                dest = (target / rel).resolve()
                if rel.is_absolute() or ".." in rel.parts or not str(dest).startswith(str(root) + os.sep):
                    skipped.append(m.name)
                    continue
                if m.isdir():
                    dest.mkdir(parents=True, exist_ok=True)
                elif m.isfile():
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    f = tf.extractfile(m)
                    if dest.is_symlink():
                        dest.unlink()
                    with open(dest, "wb") as out:
                        while f is not None and (chunk := f.read(1 << 20)):
                            out.write(chunk)
                else:
                    skipped.append(m.name)
        return skipped

    def stat(self, path: str, service: str | None, user: str | None) -> dict[str, Any] | None:
        """A path as ``user`` sees it (a link reported as a link), or None when there is none (or
        the user may not see it)."""
        assert self.env is not None
        try:
            return dict(self.client.stat(self.env["id"], self._abs(path), service=self._service(service), user=user))
        except DenvError as e:
            if e.code in ("not_found", "permission_denied", "not_a_directory"):
                return None
            raise

    def _abs(self, path: str) -> str:
        if path.startswith("/"):
            return path
        return posixpath.join(self.workdir or "/", path)

    # --- denv's own ---------------------------------------------------------------------------

    def snapshot(self) -> str:
        """A version of the trial's current state (to fork later trials from)."""
        assert self.env is not None
        d = self.client.snapshot(self.env["id"])
        return str(d["version_id"])

    def verify(self) -> dict[str, Any]:
        """denv verify: graded on a fork as a separate principal; the agent cannot touch it."""
        assert self.env is not None
        return verdict(self.client.verify(self.env["id"]))


def _as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _env_name(session_id: str) -> str:
    stem = "".join(ch if ch.isalnum() else "-" for ch in session_id.lower()).strip("-")[:40]
    import secrets

    return f"h-{stem or 'trial'}-{secrets.token_hex(3)}"
