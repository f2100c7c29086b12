"""A typed client of denv's /v1 API, on the standard library only.

These machines (and many training clusters) cannot install from PyPI, so the client speaks HTTP
with :mod:`urllib` and moves files as tar archives with :mod:`tarfile`. JSON on the wire is
snake_case, as in the product documentation; responses come back as plain dicts typed with
:class:`typing.TypedDict`, generated from the server's OpenAPI document (``_api_types.py``).
"""

from __future__ import annotations

import base64
import io
import json
import os
import tarfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

from ._api_types import (
    GetV1DeploymentsByIdResponse,
    GetV1EnvsByIdFilesStatResponse,
    GetV1EnvsByIdResponse,
    GetV1ProjectsByIdResponse,
    PostV1ProjectsByIdDeployResponsePhasesItem,
    PostV1ProjectsByIdDeployResponseVerify,
)
from ._api_methods import Api, path_of
from ._logs import read_logs
from .errors import DenvError, error_for


# The API's answers, typed from the server's OpenAPI document (_api_types.py is generated from it).
Deployment = GetV1DeploymentsByIdResponse
Environment = GetV1EnvsByIdResponse
#: A path in a service as its user saw it (GET /v1/envs/{id}/files/stat and /list).
FileEntry = GetV1EnvsByIdFilesStatResponse
Project = GetV1ProjectsByIdResponse
Phase = PostV1ProjectsByIdDeployResponsePhasesItem
VerifyOutcome = PostV1ProjectsByIdDeployResponseVerify


def _chunks(f: BinaryIO, size: int = 1 << 20) -> Iterator[bytes]:
    """A binary file's bytes in chunks of ``size`` (sent as they are read)."""
    while chunk := f.read(size):
        yield chunk


def _read_exactly(f: BinaryIO, n: int) -> bytes:
    """``n`` bytes of a stream (fewer only at its end)."""
    parts: list[bytes] = []
    while n > 0:
        chunk = f.read(n)
        if not chunk:
            break
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


#: Output a whole answer holds when the request names no limit, as the server's own default.
_DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 * 1024


def _exec_output(r: dict[str, Any], stdout: bytes, stderr: bytes) -> ExecOutput:
    """An exec result as the API answers it (its output given apart: decoded, collected or streamed)."""
    return ExecOutput(
        exit_code=int(r["exit_code"]),
        stdout=stdout,
        stderr=stderr,
        stdout_truncated=bool(r["stdout_truncated"]),
        stderr_truncated=bool(r["stderr_truncated"]),
        timed_out=bool(r["timed_out"]),
        duration_ms=float(r["duration_ms"]),
        stdout_dropped_bytes=int(r.get("stdout_dropped_bytes", 0)),
        stderr_dropped_bytes=int(r.get("stderr_dropped_bytes", 0)),
    )


def _who(fields: dict[str, Any], service: str | None, user: str | None) -> dict[str, Any]:
    """A files request's fields, with the service and the user when given."""
    return {**fields, **({"service": service} if service else {}), **({"user": user} if user else {})}


@dataclass(frozen=True)
class ExecOutput:
    """The result of one command. ``stdout``/``stderr`` are bytes; ``text()`` decodes them."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    duration_ms: float
    #: Bytes of output past ``max_output_bytes``, dropped (0 when nothing was).
    stdout_dropped_bytes: int = 0
    stderr_dropped_bytes: int = 0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


def _config_file() -> dict[str, str]:
    path = os.environ.get("DENV_CONFIG") or os.path.join(
        os.environ.get("XDG_CONFIG_HOME") or os.path.join(Path.home(), ".config"), "denv", "config.json"
    )
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


class Client:
    """The /v1 API.

    The server and key come from the arguments, else ``DENV_SERVER`` / ``DENV_API_KEY``, else the
    file ``denv login`` wrote (``~/.config/denv/config.json``), the same order as the CLI.
    """

    def __init__(
        self,
        server: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = 900.0,
    ) -> None:
        file = _config_file()
        base = server or os.environ.get("DENV_SERVER") or file.get("server")
        key = api_key or os.environ.get("DENV_API_KEY") or file.get("api_key")
        if not base or not key:
            raise error_for(
                "unauthenticated",
                "no server or API key: pass server= and api_key=, set DENV_SERVER and DENV_API_KEY, "
                "or run `denv login`",
            )
        self.server = base.rstrip("/")
        self._key = key
        self.timeout_s = timeout_s
        #: Every route of the API as a named method (``client.api.envs.fork(env, {"name": "x"})``),
        #: generated from the server's routes as the TypeScript SDK's are; the methods below use it.
        self.api = Api(self._send)

    # --- transport ---------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        raw: bytes | Iterable[bytes] | BinaryIO | None = None,
        content_type: str = "application/json",
        query: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> tuple[int, bytes, str]:
        url = self.server + path
        if query:
            url += "?" + urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("authorization", f"Bearer {self._key}")
        if data is not None:
            req.add_header("content-type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as res:
                return res.status, res.read(), res.headers.get("content-type", "")
        except urllib.error.HTTPError as e:
            payload = e.read()
            try:
                err = json.loads(payload)["error"]
                raise error_for(
                    str(err.get("code", "internal")),
                    str(err.get("message", "")),
                    status=e.code,
                    details=err.get("details"),
                ) from None
            except (ValueError, KeyError, TypeError):
                raise error_for(
                    "internal", f"HTTP {e.code} from {method} {path}: {payload[:200]!r}", status=e.code
                ) from None
        except urllib.error.URLError as e:
            raise error_for("unavailable", f"cannot reach the denv server at {self.server}: {e.reason}") from None
        except TimeoutError:
            raise error_for("timeout", f"{method} {path} did not answer in time") from None

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        raw: bytes | Iterable[bytes] | BinaryIO | None = None,
        content_type: str = "application/json",
        query: dict[str, str | None] | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """One request of a named method: a JSON answer parsed, any other answer's bytes."""
        q = {k: v for k, v in (query or {}).items() if v is not None}
        _status, payload, ctype = self._request(
            method, path, body=body, raw=raw, content_type=content_type, query=q or None, timeout_s=timeout_s
        )
        if "application/json" in ctype:
            return json.loads(payload) if payload else None
        return payload

    # --- projects and deployments -------------------------------------------------------------

    def projects(self) -> list[Project]:
        return self.api.projects.list()["projects"]

    def project(self, id_or_name: str) -> Project:
        return self.api.projects.get(id_or_name)

    def create_project(self, name: str, kind: str, compose: str, *, dotenv: str | None = None) -> Project:
        """A project whose compose file is uploaded from here (source type ``local``)."""
        p = self.api.projects.create({"name": name, "kind": kind, "source": "(python)"})
        return self.upload_source(p["id"], compose, dotenv=dotenv)

    def upload_source(self, project: str, compose: str, *, dotenv: str | None = None) -> Project:
        body: dict[str, str] = {"compose": compose}
        if dotenv is not None:
            body["dotenv"] = dotenv
        return self.api.projects.set_source(project, body)

    def deploy(self, project: str, env: str = "alpha", *, wait: bool = True) -> Deployment:
        return self.api.projects.deploy(project, {"env": env}, query={"wait": "true"} if wait else None)

    def deployment(self, deployment_id: str) -> Deployment:
        return self.api.deployments.get(deployment_id)

    # --- environments -------------------------------------------------------------------------

    def envs(self) -> list[Environment]:
        return self.api.envs.list()["environments"]

    def env(self, id_or_name: str) -> Environment:
        return self.api.envs.get(id_or_name)

    def deployments(self, env: str) -> list[Deployment]:
        return self.api.envs.deployments(env)["deployments"]

    def destroy(self, env: str) -> Deployment:
        return self._until_verdict(lambda: self.api.envs.destroy(env))

    def snapshot(self, env: str, *, live: bool | str = False) -> Deployment:
        """A new version of ``env``. ``live``: True keeps every service's processes too (its forks
        continue from them); ``"best-effort"`` keeps disk-only the services that cannot be taken."""
        return self._until_verdict(lambda: self.api.envs.snapshot(env, {"live": live} if live else {}))

    def _until_verdict(self, call: Callable[[], Deployment]) -> Deployment:
        """A call answered with a deployment's verdict. The server holds a request at most about
        4 minutes, then answers ``timeout`` naming the deployment, which goes on: it is polled
        here until it has its verdict."""
        try:
            return call()
        except DenvError as err:
            dep = err.details.get("deployment_id") if isinstance(err.details, dict) else None
            if err.code != "timeout" or not isinstance(dep, str):
                raise
            while True:
                d = self.api.deployments.get(dep)
                if d["status"] not in ("running", "queued"):
                    return d
                time.sleep(1.0)

    def fork(self, env: str, name: str | None = None, *, cold: bool = False) -> Environment:
        """A new environment from ``env``'s current version; ``cold`` starts every service afresh
        even where the version is live."""
        body: dict[str, Any] = {"name": name} if name else {}
        if cold:
            body["cold"] = True
        return self.api.envs.fork(env, body)

    def pause(self, env: str) -> Environment:
        """Pause keeping memory: every process checkpointed to disk and stopped."""
        return self.api.envs.pause(env)

    def resume(self, env: str) -> Environment:
        """Resume a paused environment (its processes carry on), or thaw one verify froze."""
        return self.api.envs.resume(env)

    def rollback(self, env: str, version: str) -> Deployment:
        return self._until_verdict(lambda: self.api.envs.rollback(env, {"version": version}))

    def verify(self, env: str, *, resume: bool | None = None) -> Deployment:
        """Grade the environment on a fork. ``resume``: True, the agent runs again; False, it is left
        frozen for inspection; None (the default), frozen, but an environment deploys land on
        (alpha) runs again."""
        return self._until_verdict(lambda: self.api.envs.verify(env, {} if resume is None else {"resume": resume}))

    def diff(self, env: str, against: str | None = None, *, max_entries: int | None = None) -> dict[str, Any]:
        """What changed in the environment since a version (default: the one it came from): every
        volume's paths created, modified and deleted, text diffs, and PostgreSQL's rows per table."""
        query = {"against": against, "max_entries": str(max_entries) if max_entries else None}
        return dict(self.api.envs.diff(env, query=query))

    def version(self, version_id: str) -> dict[str, Any]:
        return self.api.versions.get(version_id)

    def sandbox(
        self,
        *,
        from_version: str | None = None,
        image: str | None = None,
        cmd: list[str] | None = None,
        env_vars: dict[str, str] | None = None,
        ports: list[int] | None = None,
        volumes: list[str] | None = None,
        egress: Literal["deny", "allow"] | None = None,
        user: str | None = None,
        name: str | None = None,
    ) -> Environment:
        """POST /v1/sandboxes: a fork of a version, or a one-container sandbox from an image."""
        if (from_version is None) == (image is None):
            raise DenvError("invalid_argument", "pass exactly one of from_version= and image=")
        body: dict[str, Any] = {"from_version": from_version} if from_version else {"image": image}
        for k, v in (("cmd", cmd), ("env", env_vars), ("ports", ports), ("volumes", volumes)):
            if v is not None:
                body[k] = v
        for k, v in (("egress", egress), ("user", user)):
            if v is not None:
                body[k] = v
        if name is not None:
            body["name"] = name
        return self.api.sandboxes.create(body)

    # --- exec and files -----------------------------------------------------------------------

    def exec(
        self,
        env: str,
        command: list[str] | str,
        *,
        service: str | None = None,
        user: str | None = None,
        cwd: str | None = None,
        env_vars: dict[str, str] | None = None,
        stdin: bytes | str | None = None,
        timeout_ms: int | None = None,
        max_output_bytes: int | None = None,
    ) -> ExecOutput:
        """Runs a command (argv, or a string for ``sh -c``) in environment ``env`` (id, name or
        project/name), with ``env_vars`` added to its variables; output comes back as bytes.

        The command's ``timeout_ms`` reaches the host unchanged (the host kills the command when it
        passes and answers with ``timed_out`` and the output so far); the answer streams, with a
        keep-alive while the command is quiet, so a command of hours is not cut on the way."""
        return self.exec_stream(
            env,
            command,
            lambda _stream, _data: None,
            service=service,
            user=user,
            cwd=cwd,
            env_vars=env_vars,
            stdin=stdin,
            timeout_ms=timeout_ms,
            # Held whole, so bounded as the server bounds its whole-output answer by default.
            max_output_bytes=_DEFAULT_MAX_OUTPUT_BYTES if max_output_bytes is None else max_output_bytes,
        )

    def exec_stream(
        self,
        env: str,
        command: list[str] | str,
        on_output: Any,
        *,
        service: str | None = None,
        user: str | None = None,
        cwd: str | None = None,
        env_vars: dict[str, str] | None = None,
        stdin: bytes | str | None = None,
        timeout_ms: int | None = None,
        max_output_bytes: int | None = None,
    ) -> ExecOutput:
        """Like :meth:`exec`, with ``on_output(stream, data)`` called for each chunk of output as the
        command writes it (``stream`` is "stdout" or "stderr"); the result holds all of it too."""
        body: dict[str, Any] = {"command": command, "encoding": "base64"}
        for k, v in (("service", service), ("user", user), ("cwd", cwd), ("env", env_vars or None)):
            if v is not None:
                body[k] = v
        if stdin is not None:
            body["stdin"] = base64.b64encode(stdin.encode() if isinstance(stdin, str) else stdin).decode()
        if timeout_ms is not None:
            body["timeout_ms"] = int(timeout_ms)
        if max_output_bytes is not None:
            body["max_output_bytes"] = int(max_output_bytes)
        url = f"{self.server}{path_of('envs.exec', id=env)}?stream=true"
        req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
        req.add_header("authorization", f"Bearer {self._key}")
        req.add_header("content-type", "application/json")
        # A socket timeout here is a silence of that long: the server sends a keep-alive line while
        # the command is quiet, so only a server that stopped answering reaches it.
        out: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
        try:
            res = urllib.request.urlopen(req, timeout=self.timeout_s)
        except urllib.error.HTTPError as e:
            err = json.loads(e.read() or b"{}").get("error", {})
            raise error_for(str(err.get("code", "internal")), str(err.get("message", "")), status=e.code) from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, TimeoutError):
                raise error_for("timeout", f"the denv server at {self.server} did not answer within {self.timeout_s} s") from None
            raise error_for("unavailable", f"cannot reach the denv server at {self.server}: {e.reason}") from None
        except TimeoutError:
            raise error_for("timeout", f"the denv server at {self.server} did not answer within {self.timeout_s} s") from None
        with res:
            for line in _lines_or_timeout(res, self.timeout_s):
                if not line.strip():
                    continue
                msg = json.loads(line)
                if "stream" in msg:
                    data = base64.b64decode(msg["data"])
                    out[msg["stream"]].append(data)
                    on_output(msg["stream"], data)
                elif "result" in msg:
                    r = msg["result"]
                    return _exec_output(r, b"".join(out["stdout"]), b"".join(out["stderr"]))
                elif "error" in msg:
                    raise error_for(str(msg["error"].get("code", "internal")), str(msg["error"].get("message", "")))
        raise error_for("unavailable", "the exec stream ended without a result")

    def logs(
        self,
        env: str,
        *,
        service: str | None = None,
        tail: int | None = None,
        since: str | None = None,
        follow: bool = False,
    ) -> Iterator[dict[str, str]]:
        """What the environment's services wrote, as ``docker compose logs``: each line as
        ``{"service", "stream", "time", "line"}``, every service's or ``service``'s, the last
        ``tail`` of each or those ``since`` a time or a duration back ("10m"); with ``follow``, the
        lines written from then on, until the caller stops iterating."""
        return read_logs(self, env, service=service, tail=tail, since=since, follow=follow)

    def fan_out(
        self, version: str, count: int, *, name_prefix: str | None = None, sandbox: bool = False
    ) -> dict[str, Any]:
        """``count`` forks of a version in one call, named ``<name_prefix>-1`` … (default ``fork``).
        Each fork's outcome is in ``forks`` (``ok``, and ``environment`` or ``error``); ``created`` and
        ``failed`` count them: a partial success is reported, not raised."""
        body: dict[str, Any] = {"count": int(count), **({"name_prefix": name_prefix} if name_prefix else {})}
        if sandbox:
            body["sandbox"] = True
        return self.api.versions.fork(version, body)

    def set_pool(self, version: str, size: int) -> dict[str, Any]:
        """Keeps ``size`` ready forks of a version (a warm pool): a create of that version (a
        sandbox ``from_version``, a fork, a fan-out) takes one at once and the pool refills behind
        it. ``size`` 0 drains it. Refused with ``capacity`` when the host has no room for them."""
        return dict(self.api.pools.keep(version, {"size": int(size)}))

    def set_image_pool(self, size: int, *, image: str, **settings: Any) -> dict[str, Any]:
        """Keeps ``size`` ready sandboxes of an image and settings (``cmd``, ``env``, ``ports``,
        ``volumes``, ``egress``, ``user``): ``Sandbox.create`` with the same settings takes one at
        once. ``size`` 0 drains it."""
        return dict(self.api.pools.keep_image({"size": int(size), "image": image, **settings}))

    def pool(self, version: str) -> dict[str, Any]:
        """A version's warm pool: ``size``, ``ready``, ``warming``, ``hits``, ``misses``, ``hit_rate``."""
        return dict(self.api.pools.get(version))

    def pools(self) -> list[dict[str, Any]]:
        """The team's warm pools."""
        return list(self.api.pools.list()["pools"])

    def drain_pool(self, version: str) -> int:
        """Drains a version's warm pool (its ready forks are destroyed); how many were."""
        return int(self.api.pools.drain(version)["drained"])

    # --- episode fidelity: replays, promote, data sheets, versions ---------------------------

    def replay(
        self,
        version: str,
        steps: list[dict[str, Any]] | None = None,
        *,
        forks: int = 20,
        parallel: int = 4,
    ) -> dict[str, Any]:
        """Runs one scripted episode in ``forks`` forks of a version and compares them. ``version``
        is ``ver_…``, ``PROJECT@ver_…`` or an environment (``PROJECT/ENV``); each step is
        ``{"service", "command"}`` (a string runs with ``sh -c``) or ``{"verifier": True}``; no steps:
        the version's default episode. The answer's ``status`` is ``identical`` or ``diverged``, and
        its ``report`` has ``first_divergence`` (fork, step or volume, diff, sources)."""
        body: dict[str, Any] = {"forks": int(forks), "parallel": int(parallel)}
        if steps is not None:
            body["steps"] = steps
        return dict(
            self.api.versions.replay(version, body, query={"wait": "true"}, timeout_s=max(self.timeout_s, 3600.0))
        )

    def promote(
        self,
        project: str,
        from_env: str | None,
        to_env: str,
        *,
        version: str | None = None,
        replays: int = 5,
        soak_ms: int = 10_000,
        steps: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Points ``to_env`` at ``from_env``'s current version (or ``version``) through the gates:
        fresh fork, dataset consistency, identical replays, invariants, soak. Returns the
        deployment: ``status`` ``succeeded``, or ``rolled_back`` with the failed gate in ``reason``."""
        body: dict[str, Any] = {"to": to_env, "replays": int(replays), "soak_ms": int(soak_ms)}
        if from_env is not None:
            body["from"] = from_env
        if version is not None:
            body["version"] = version
        if steps is not None:
            body["steps"] = steps
        return dict(
            self.api.projects.promote(project, body, query={"wait": "true"}, timeout_s=max(self.timeout_s, 3600.0))
        )

    def datasheet(self, ref: str, *, markdown: bool = False) -> Any:
        """A version's data sheet (an environment names its current version): a dict, or the
        Markdown text with ``markdown=True``."""
        if not markdown:
            return dict(self.api.versions.datasheet(ref))
        # The Markdown answer is text, not JSON: the named method answers with its bytes.
        payload: Any = self.api.versions.datasheet(ref, query={"format": "markdown"})
        return bytes(payload).decode("utf-8")

    def versions(self, project: str | None = None) -> list[dict[str, Any]]:
        """The team's versions, newest first, each with ``in_use`` (what keeps it)."""
        return list(self.api.versions.list(query={"project": project})["versions"])

    def delete_version(self, ref: str) -> str:
        """Deletes a version nothing uses (its snapshots on every host and its record); ``ConflictError``
        names what uses it. A host away deletes its copy when it is back."""
        return str(self.api.versions.delete(ref)["deleted"])

    def replicate_version(self, ref: str, host: str) -> dict[str, Any]:
        """Copies a version's snapshots to another host (its name or id), relayed through the
        server; ``already`` when it held them. The copy's figures: ``bytes``, ``ms``, ``mib_per_s``."""
        return dict(self.api.versions.copy(ref, {"host": host}))

    def keep_copies(self, ref: str, copies: int) -> dict[str, Any]:
        """Keeps ``copies`` copies of a version on distinct hosts (as ``x-denv.replicas`` does);
        the answer says which were made now and which could not be."""
        return dict(self.api.versions.keep_replicas(ref, {"copies": int(copies)}))

    def port_url(self, env: str, port: int, *, service: str | None = None) -> str:
        """A URL reaching a TCP port inside a service (HTTP and WebSocket); the URL is the credential."""
        body = {"service": service} if service else {}
        return str(self.api.envs.open_port(env, str(int(port)), body)["url"])

    def put_tar(
        self,
        env: str,
        path: str,
        tar: bytes | Iterable[bytes] | BinaryIO,
        *,
        service: str | None = None,
        user: str | None = None,
    ) -> dict[str, int]:
        """Extracts a tar archive at ``path`` (absolute) in the service, as ``user`` (default: the
        service's own). Missing parents are made; a directory is never replaced by a file (the
        error is ``is_directory``), nor a file by a directory (``not_a_directory``). ``tar`` may be
        bytes, a binary file or an iterable of chunks: those stream, of any size."""
        q = _who({"path": path}, service, user)
        if hasattr(tar, "read"):
            tar = _chunks(tar)  # type: ignore[arg-type]
        return dict(self.api.files.write(env, tar, query=q))  # type: ignore[arg-type]

    def get_tar(self, env: str, path: str, *, service: str | None = None, user: str | None = None) -> bytes:
        """A tar archive of ``path`` (absolute) in the service, read as ``user`` (default: the
        service's own), never following a link."""
        with self.get_tar_stream(env, path, service=service, user=user) as res:
            return res.read()

    def get_tar_stream(
        self, env: str, path: str, *, service: str | None = None, user: str | None = None
    ) -> BinaryIO:
        """The same tar as a binary file to read as it streams (close it, or use ``with``). A missing
        path or a refusal is raised here, before the first byte."""
        url = f"{self.server}{path_of('files.read', id=env)}?" + urllib.parse.urlencode(
            _who({"path": path}, service, user)
        )
        return self._open(urllib.request.Request(url, method="GET"), self.timeout_s)

    def _open(self, req: urllib.request.Request, timeout_s: float) -> BinaryIO:
        """Opens a request whose answer is read as it streams; errors mapped as _request maps them."""
        req.add_header("authorization", f"Bearer {self._key}")
        try:
            return urllib.request.urlopen(req, timeout=timeout_s)  # noqa: S310 (the server's own URL)
        except urllib.error.HTTPError as e:
            try:
                err = json.loads(e.read() or b"{}").get("error", {})
            except ValueError:
                err = {}
            raise error_for(
                str(err.get("code", "internal")), str(err.get("message", f"HTTP {e.code}")), status=e.code
            ) from None
        except urllib.error.URLError as e:
            raise error_for("unavailable", f"cannot reach the denv server at {self.server}: {e.reason}") from None

    def exec_with_stdin(
        self,
        env: str,
        command: list[str] | str,
        stdin: Iterable[bytes] | BinaryIO,
        on_output: Callable[[str, bytes], None],
        *,
        service: str | None = None,
        user: str | None = None,
        cwd: str | None = None,
        env_vars: dict[str, str] | None = None,
        timeout_ms: int | None = None,
        max_output_bytes: int | None = None,
    ) -> ExecOutput:
        """Runs a command with ``stdin`` streamed to it as it is read (a binary file or an iterable
        of chunks, of any size), ``on_output(stream, data)`` called as it writes. The result's
        ``stdout``/``stderr`` are empty: the output went to ``on_output``."""
        request: dict[str, Any] = {"command": command}
        for k, v in (("service", service), ("user", user), ("cwd", cwd), ("env", env_vars or None)):
            if v is not None:
                request[k] = v
        if timeout_ms is not None:
            request["timeout_ms"] = int(timeout_ms)
        if max_output_bytes is not None:
            request["max_output_bytes"] = int(max_output_bytes)

        def body() -> Iterator[bytes]:
            yield json.dumps(request).encode() + b"\n"
            yield from _chunks(stdin) if hasattr(stdin, "read") else stdin  # type: ignore[arg-type]

        req = urllib.request.Request(f"{self.server}{path_of('envs.exec_stream', id=env)}", data=body(), method="POST")
        req.add_header("content-type", "application/octet-stream")
        # As exec_stream: the socket's timeout is a silence (the server keeps a quiet command's stream alive).
        with self._open(req, self.timeout_s) as res:
            # Frames: u8 kind (1 stdout, 2 stderr, 3 result, 4 error, 5 keep-alive), three zero
            # bytes, u32 length.
            try:
                while head := _read_exactly(res, 8):
                    kind, length = head[0], int.from_bytes(head[4:8], "big")
                    payload = _read_exactly(res, length)
                    if kind in (1, 2):
                        on_output("stdout" if kind == 1 else "stderr", payload)
                    elif kind == 3:
                        r = json.loads(payload)
                        return _exec_output(r, b"", b"")
                    elif kind == 4:
                        e = json.loads(payload).get("error", {})
                        raise error_for(str(e.get("code", "internal")), str(e.get("message", "")))
            except TimeoutError:
                raise error_for(
                    "timeout", f"the server sent nothing for {self.timeout_s} s while a command ran (no keep-alive)"
                ) from None
        raise error_for("unavailable", "the exec stream ended without a result")

    def put_files(
        self, env: str, target_dir: str, files: dict[str, bytes], *, service: str | None = None
    ) -> dict[str, int]:
        """Writes ``{relative name: contents}`` under ``target_dir``."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = 0o644
                tf.addfile(info, io.BytesIO(data))
        return self.put_tar(env, target_dir, buf.getvalue(), service=service)

    def get_files(self, env: str, path: str, *, service: str | None = None) -> dict[str, bytes]:
        """``{name in the archive: contents}`` for the regular files under ``path``."""
        out: dict[str, bytes] = {}
        with tarfile.open(fileobj=io.BytesIO(self.get_tar(env, path, service=service)), mode="r") as tf:
            for m in tf.getmembers():
                if m.isfile():
                    f = tf.extractfile(m)
                    out[m.name] = f.read() if f else b""
        return out

    def stat(self, env: str, path: str, *, service: str | None = None, user: str | None = None) -> FileEntry:
        """A path's type, size, mode, owner and modification time (a link is reported as a link)."""
        return self.api.files.stat(env, query=_who({"path": path}, service, user))

    def list(
        self, env: str, path: str, *, depth: int = 1, service: str | None = None, user: str | None = None
    ) -> list[FileEntry]:
        """A directory's entries, ``depth`` levels down (links are listed, not entered)."""
        q = _who({"path": path, "depth": str(depth)}, service, user)
        return self.api.files.list(env, query=q)["entries"]

    def mkdir(
        self, env: str, path: str, *, parents: bool = True, service: str | None = None, user: str | None = None
    ) -> bool:
        """Makes a directory (and its parents), owned by the user; False when it was already there."""
        body = _who({"path": path, "parents": parents}, service, user)
        return bool(self.api.files.mkdir(env, body)["created"])

    def remove(
        self, env: str, path: str, *, recursive: bool = False, service: str | None = None, user: str | None = None
    ) -> None:
        """Removes a file, a link or an empty directory; ``recursive`` removes a whole tree."""
        q = _who({"path": path, **({"recursive": "true"} if recursive else {})}, service, user)
        self.api.files.remove(env, query=q)

    def rename(self, env: str, src: str, dst: str, *, service: str | None = None, user: str | None = None) -> None:
        """Renames or moves a path; a file over a directory (or the reverse) is refused."""
        self.api.files.rename(env, _who({"from": src, "to": dst}, service, user))

    # --- hosts and targets --------------------------------------------------------------------

    def hosts(self) -> list[dict[str, Any]]:
        return self.api.hosts.list()["hosts"]

    def drain_host(self, host: str) -> dict[str, Any]:
        """Drains a host before maintenance: it takes nothing new, its ready pool members are
        withdrawn and versions it alone held are copied off (``replicated``, ``not_replicated``)."""
        return dict(self.api.hosts.drain(host))

    def undrain_host(self, host: str) -> dict[str, Any]:
        """Takes a host back into placement after a drain."""
        return dict(self.api.hosts.undrain(host))

    def targets(self) -> list[dict[str, Any]]:
        return self.api.targets.list()["targets"]

    def openapi(self) -> dict[str, Any]:
        return self.api.meta.openapi()


def _lines_or_timeout(res: Any, timeout_s: float) -> Iterator[bytes]:
    """A streamed answer's lines; a silence longer than the socket's timeout is ``timeout``."""
    try:
        yield from res
    except TimeoutError:
        raise error_for(
            "timeout", f"the server sent nothing for {timeout_s} s while a command ran (no keep-alive)"
        ) from None
