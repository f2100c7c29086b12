"""Harbor's environment contract on denv, without Harbor: what ``denv.harbor`` delegates to.

One trial is one denv environment. Where it comes from, in order: ``fork_from`` (an environment
or a version: the trial starts from that exact state); an environment directory with a Dockerfile
or a compose file (a task's ``environment/``, or a separate verifier's ``tests/``), deployed once per
content and forked per trial; or ``[environment].docker_image`` alone (a one-container sandbox).

The directory is read by the same code as ``denv import harbor`` (the CLI's harbor-task module:
main's image by Harbor's precedence, Harbor's compose variables, the compose file merged over
main), through ``denv import harbor-environment``, which also uploads the build context so that
denv builds the image on the host. The CLI is found as ``DENV_CLI`` (a command line) or ``denv`` on
PATH.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._bases import verdict
from ._compose import COMPOSE_NAMES
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
        config: dict[str, Any] | None = None,
    ) -> None:
        self.environment_dir = environment_dir
        self.session_id = session_id
        self.docker_image = docker_image
        self.workdir = workdir
        self.no_network = no_network
        self.fork_from = fork_from
        #: The task's [environment] fields the directory's reading uses (docker_image, workdir, …).
        self.config = {k: v for k, v in (config or {}).items() if v is not None}
        self._server, self._api_key = server, api_key
        self._client: Client | None = None
        self.env: Environment | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(self._server, self._api_key)
        return self._client

    def validate_definition(self) -> None:
        if self.fork_from or self.docker_image or self.builds:
            return
        raise FileNotFoundError(
            f"{self.environment_dir}: no Dockerfile, no docker-compose.yaml, no [environment].docker_image "
            "and no fork_from: denv has nothing to run"
        )

    @property
    def uses_compose(self) -> bool:
        return not self.fork_from and compose_file(self.environment_dir) is not None

    @property
    def builds(self) -> bool:
        """The directory is deployed as a project (a Dockerfile to build, or a compose file to merge)."""
        d = self.environment_dir
        return not self.fork_from and (compose_file(d) is not None or (d / "Dockerfile").is_file())

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
        elif self.builds:
            base = self._ensure_base(egress)
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

    def _ensure_base(self, egress: str) -> Environment:
        """The directory's project, deployed once per content (its files, the config and egress) as
        ``<project>/base``; every trial forks it."""
        c = self.client
        name = f"harbor-{_content_digest(self.environment_dir, self.config, egress)}"
        with _base_lock:
            try:
                env = c.env(f"{name}/base")
                if env["status"] == "running" and env["current_version_id"]:
                    return env
            except DenvError as e:
                if e.code != "not_found":
                    raise
            out = _cache_dir() / name
            argv = [
                *_cli(),
                "import", "harbor-environment", str(self.environment_dir.resolve()), str(out),
                "--name", name, "--config", json.dumps(self.config), "--egress", egress,
                "--deploy", "base", "--json",
            ]  # fmt: skip
            env_vars = {**os.environ, "DENV_SERVER": c.server, "DENV_API_KEY": c._key}
            r = subprocess.run(argv, capture_output=True, text=True, env=env_vars, check=False)
            if r.returncode != 0:
                raise RuntimeError(f"denv could not deploy {self.environment_dir}: {_cli_failure(r)}")
            return c.env(f"{name}/base")

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
        self.client.api.envs.stop_service(self.env["id"], svc or MAIN)

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


_base_lock = threading.Lock()


def _cli() -> list[str]:
    """The denv CLI's command line: DENV_CLI, else ``denv`` on PATH."""
    if os.environ.get("DENV_CLI"):
        return shlex.split(os.environ["DENV_CLI"])
    found = shutil.which("denv")
    if not found:
        raise FileNotFoundError(
            "this environment has a Dockerfile or a compose file, which denv deploys through its CLI "
            "(`denv import harbor-environment`): put `denv` on PATH or set DENV_CLI to its command line"
        )
    return [found]


def _cli_failure(r: subprocess.CompletedProcess[str]) -> str:
    """Why `denv import harbor-environment --json` failed: its error, or the failed phase."""
    try:
        out = json.loads(r.stdout)
        if isinstance(out.get("error"), dict):
            return str(out["error"]["message"])
        d = out["deployment"]
        failed = next((p for p in d["phases"] if p["status"] == "failed"), None)
        return f"phase {failed['name']}: {failed['reason']}" if failed else str(d["reason"])
    except (ValueError, KeyError, TypeError, AttributeError):
        tail = r.stderr.strip().splitlines()[-1:]
        return tail[0] if tail else f"the CLI exited {r.returncode}"


def _cache_dir() -> Path:
    """Where deployed environment projects are kept (a local project's source stays on disk):
    DENV_CACHE_DIR, else $XDG_CACHE_HOME/denv, else ~/.cache/denv."""
    root = os.environ.get("DENV_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "denv"
    )
    d = Path(root) / "harbor"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _content_digest(directory: Path, config: dict[str, Any], egress: str) -> str:
    """A digest of the directory's entries (names, modes, bytes, link targets: links are never
    followed), the config and egress: the same environment deploys once."""
    h = hashlib.sha256(json.dumps([config, egress], sort_keys=True).encode())
    if directory.is_dir() and not directory.is_symlink():
        for root, dirs, files in os.walk(directory, followlinks=False):
            dirs.sort()
            for n in sorted(files + [d for d in dirs if os.path.islink(os.path.join(root, d))]):
                p = os.path.join(root, n)
                st = os.lstat(p)
                h.update(f"\0{os.path.relpath(p, directory)}\0{st.st_mode:o}\0".encode())
                if os.path.islink(p):
                    h.update(os.readlink(p).encode())
                elif os.path.isfile(p):
                    with open(p, "rb") as f:
                        while chunk := f.read(1 << 20):
                            h.update(chunk)
    return h.hexdigest()[:16]


def _as_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _env_name(session_id: str) -> str:
    stem = "".join(ch if ch.isalnum() else "-" for ch in session_id.lower()).strip("-")[:40]
    import secrets

    return f"h-{stem or 'trial'}-{secrets.token_hex(3)}"
