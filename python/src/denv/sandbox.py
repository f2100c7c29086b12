"""Sandboxes with the shape people already use (E2B's, Modal's): ``Sandbox.create(...)`` makes one
(a fork of a version, or a one-service sandbox from an image), ``sb.commands.run(...)`` runs
commands, ``sb.files`` reads and writes files as the service's user, and leaving a ``with`` block
destroys it. ``AsyncSandbox`` is the same surface for asyncio.

    with Sandbox.create(from_version="ver_0123456789ab") as sb:
        r = sb.commands.run("psql -tAc 'select 1'", timeout_ms=10_000)
        sb.files.write("/home/ubuntu/answer.txt", "42\\n")
"""

from __future__ import annotations

import asyncio
import io
import posixpath
import tarfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal

from .client import Client, Deployment, Environment, FileEntry
from .errors import NotFoundError, UnavailableError


@dataclass
class CommandResult:
    """One command's outcome: its exit code, its output (decoded and as bytes), and what was dropped."""

    exit_code: int
    stdout: str
    stderr: str
    stdout_bytes: bytes
    stderr_bytes: bytes
    stdout_dropped_bytes: int
    stderr_dropped_bytes: int
    timed_out: bool
    duration_ms: float


class Commands:
    """Commands in a sandbox's services."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def run(
        self,
        cmd: list[str] | str,
        *,
        service: str | None = None,
        user: str | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_ms: int | None = None,
        stdin: bytes | str | Iterable[bytes] | BinaryIO | None = None,
        max_output_bytes: int | None = None,
        on_stdout: Callable[[bytes], None] | None = None,
        on_stderr: Callable[[bytes], None] | None = None,
    ) -> CommandResult:
        """Runs a command (argv, or a string for ``sh -c``) and returns once it has ended, whatever its
        exit code. ``env`` adds variables (HOME, USER and LOGNAME are the user's unless set here);
        ``timeout_ms`` kills every process the command started; ``on_stdout``/``on_stderr`` get the
        output as it comes. ``stdin`` may be a binary file or an iterable of chunks: it streams to
        the command as it is read, of any size."""
        if stdin is not None and not isinstance(stdin, (bytes, str)):
            out: dict[str, list[bytes]] = {"stdout": [], "stderr": []}

            def keep(stream: str, data: bytes) -> None:
                out[stream].append(data)
                handler = on_stdout if stream == "stdout" else on_stderr
                if handler:
                    handler(data)

            r = self._sb.client.exec_with_stdin(
                self._sb.id,
                cmd,
                stdin,
                keep,
                service=service,
                user=user,
                cwd=cwd,
                env_vars=env,
                timeout_ms=timeout_ms,
                max_output_bytes=max_output_bytes,
            )
            stdout, stderr = b"".join(out["stdout"]), b"".join(out["stderr"])
            return CommandResult(
                exit_code=r.exit_code,
                stdout=stdout.decode("utf-8", errors="replace"),
                stderr=stderr.decode("utf-8", errors="replace"),
                stdout_bytes=stdout,
                stderr_bytes=stderr,
                stdout_dropped_bytes=r.stdout_dropped_bytes,
                stderr_dropped_bytes=r.stderr_dropped_bytes,
                timed_out=r.timed_out,
                duration_ms=r.duration_ms,
            )
        kw: dict[str, Any] = {
            "service": service,
            "user": user,
            "cwd": cwd,
            "env_vars": env,
            "stdin": stdin,
            "timeout_ms": timeout_ms,
            "max_output_bytes": max_output_bytes,
        }
        c, eid = self._sb.client, self._sb.id
        if on_stdout or on_stderr:

            def each(stream: str, data: bytes) -> None:
                handler = on_stdout if stream == "stdout" else on_stderr
                if handler:
                    handler(data)

            r = c.exec_stream(eid, cmd, each, **kw)
        else:
            r = c.exec(eid, cmd, **kw)
        return CommandResult(
            exit_code=r.exit_code,
            stdout=r.stdout.decode("utf-8", errors="replace"),
            stderr=r.stderr.decode("utf-8", errors="replace"),
            stdout_bytes=r.stdout,
            stderr_bytes=r.stderr,
            stdout_dropped_bytes=r.stdout_dropped_bytes,
            stderr_dropped_bytes=r.stderr_dropped_bytes,
            timed_out=r.timed_out,
            duration_ms=r.duration_ms,
        )


def _tar_stream(info: tarfile.TarInfo, data: Iterable[bytes] | BinaryIO) -> Iterator[bytes]:
    """A one-file tar made as it is sent: the header, the data as it is read, the padding, the end.
    Data that is not exactly ``info.size`` bytes stops it (the server then keeps nothing of it)."""
    yield info.tobuf(format=tarfile.PAX_FORMAT)
    sent = 0
    source = iter(lambda: data.read(1 << 20), b"") if hasattr(data, "read") else data  # type: ignore[union-attr]
    for chunk in source:
        sent += len(chunk)
        if sent > info.size:
            raise ValueError(f"the stream is longer than its size ({info.size} bytes)")
        yield chunk
    if sent != info.size:
        raise ValueError(f"the stream ended after {sent} of its {info.size} bytes")
    yield b"\0" * ((512 - info.size % 512) % 512) + b"\0" * 1024


class Files:
    """A sandbox's files, as its service's user unless ``user=`` names another. A write makes missing
    parents and never replaces a directory with a file, nor a file with a directory
    (:class:`~denv.errors.ConflictError` with code ``is_directory`` / ``not_a_directory``)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sb = sandbox

    def read(self, path: str, *, service: str | None = None, user: str | None = None) -> bytes:
        """A file's bytes."""
        return b"".join(self.read_stream(path, service=service, user=user))

    def read_stream(
        self, path: str, *, service: str | None = None, user: str | None = None, chunk_bytes: int = 1 << 20
    ) -> Iterator[bytes]:
        """A file's bytes in chunks, as the host reads them: a file of any size in little memory. A
        missing path (:class:`~denv.errors.NotFoundError`) is raised before the first chunk."""
        res = self._sb.client.get_tar_stream(self._sb.id, path, service=service, user=user)

        def chunks() -> Iterator[bytes]:
            with res, tarfile.open(fileobj=res, mode="r|") as tf:
                for m in tf:
                    if m.isfile():
                        f = tf.extractfile(m)
                        while f is not None and (chunk := f.read(chunk_bytes)):
                            yield chunk
                        return
            raise NotFoundError("not_found", f"{path} is not a regular file", status=404)

        return chunks()

    def read_text(self, path: str, **kw: Any) -> str:
        """A file's text (UTF-8)."""
        return self.read(path, **kw).decode("utf-8")

    def write(
        self,
        path: str,
        data: bytes | str | Iterable[bytes] | BinaryIO,
        *,
        size: int | None = None,
        mode: int = 0o644,
        service: str | None = None,
        user: str | None = None,
    ) -> None:
        """Writes a file (made, or overwritten), making missing parents owned by the user. ``data``
        may be a binary file or an iterable of chunks, streamed as it is read; its ``size`` must then
        be given (the tar it travels in says it first)."""
        if not path.startswith("/") or path.endswith("/"):
            raise ValueError(f"{path} must be an absolute path to a file")
        info = tarfile.TarInfo(posixpath.basename(path))
        info.mode = mode
        if isinstance(data, (bytes, str)):
            raw = data.encode() if isinstance(data, str) else data
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
                info.size = len(raw)
                tf.addfile(info, io.BytesIO(raw))
            body: bytes | Iterable[bytes] = buf.getvalue()
        else:
            if size is None or size < 0:
                raise ValueError("a stream is written with its size: write(path, stream, size=...)")
            info.size = size
            body = _tar_stream(info, data)
        self._sb.client.put_tar(self._sb.id, posixpath.dirname(path), body, service=service, user=user)
    def stat(self, path: str, **kw: Any) -> FileEntry:
        """A path's type, size, mode, owner and time; a link is reported as a link."""
        return self._sb.client.stat(self._sb.id, path, **kw)

    def exists(self, path: str, **kw: Any) -> bool:
        """Whether a path exists, as the user sees it."""
        try:
            self.stat(path, **kw)
            return True
        except NotFoundError:
            return False

    def list(self, path: str, *, depth: int = 1, **kw: Any) -> list[FileEntry]:
        """A directory's entries, ``depth`` levels down; links are listed, not entered."""
        return self._sb.client.list(self._sb.id, path, depth=depth, **kw)

    def mkdir(self, path: str, **kw: Any) -> bool:
        """Makes a directory and its parents; False when it was already there."""
        return self._sb.client.mkdir(self._sb.id, path, **kw)

    def remove(self, path: str, *, recursive: bool = False, **kw: Any) -> None:
        """Removes a file, a link or an empty directory; ``recursive`` removes a whole tree."""
        self._sb.client.remove(self._sb.id, path, recursive=recursive, **kw)

    def rename(self, src: str, dst: str, **kw: Any) -> None:
        """Renames or moves a path."""
        self._sb.client.rename(self._sb.id, src, dst, **kw)


class Sandbox:
    """One environment used as a sandbox. Make one with :meth:`create`, or take an existing one with
    :meth:`connect`; ``with`` destroys it on the way out."""

    def __init__(self, client: Client, info: Environment) -> None:
        self.client = client
        self.info = info
        self.commands = Commands(self)
        self.files = Files(self)

    @classmethod
    def create(
        cls,
        *,
        from_version: str | None = None,
        image: str | None = None,
        cmd: list[str] | None = None,
        env: dict[str, str] | None = None,
        ports: list[int] | None = None,
        volumes: list[str] | None = None,
        egress: Literal["deny", "allow"] | None = None,
        user: str | None = None,
        name: str | None = None,
        client: Client | None = None,
    ) -> Sandbox:
        """A new sandbox, running when this returns: a fork of ``from_version``, or a one-service
        sandbox from ``image`` (only ``volumes``, default ``/work``, persist across snapshot and fork).
        The client defaults to DENV_SERVER and DENV_API_KEY (or ``denv login``'s)."""
        c = client or Client()
        info = c.sandbox(
            from_version=from_version,
            image=image,
            cmd=cmd,
            env_vars=env,
            ports=ports,
            volumes=volumes,
            egress=egress,
            user=user,
            name=name,
        )
        return cls(c, info)

    @classmethod
    def connect(cls, id_or_name: str, *, client: Client | None = None) -> Sandbox:
        """An existing environment (id, name, or project/name), as a sandbox."""
        c = client or Client()
        return cls(c, c.env(id_or_name))

    @property
    def id(self) -> str:
        """The environment's id (env_…)."""
        return self.info["id"]

    @property
    def name(self) -> str:
        """The environment's name in its project."""
        return self.info["name"]

    def refresh(self) -> Environment:
        """Reads the environment again (status, current version, services)."""
        self.info = self.client.env(self.id)
        return self.info

    def snapshot(self) -> Deployment:
        """The live state as a new version (the deployment's ``version_id``)."""
        d = self.client.snapshot(self.id)
        self.refresh()
        return d

    def fork(self, *, name: str | None = None) -> Sandbox:
        """A new sandbox from this one's current version."""
        return Sandbox(self.client, self.client.fork(self.id, name))

    def verify(self, *, resume: bool = False) -> dict[str, Any]:
        """Grades the environment on a fork, as a separate principal: ``{reward, reason, exit_code, agent}``."""
        d = self.client.verify(self.id, resume=resume)
        if not d.get("verify"):
            raise UnavailableError("unavailable", f"verify did not grade: {d.get('reason') or d['status']}")
        return dict(d["verify"])

    def diff(self, against: str | None = None) -> dict[str, Any]:
        """What changed since a version (default: the one it came from): see ``Client.diff``."""
        return self.client.diff(self.id, against)

    def port_url(self, port: int, *, service: str | None = None) -> str:
        """A URL reaching a TCP port inside a service (HTTP and WebSocket); the URL is the credential."""
        return self.client.port_url(self.id, port, service=service)

    def destroy(self) -> None:
        """Destroys the environment (its versions stay). Idempotent."""
        try:
            self.client.destroy(self.id)
        except NotFoundError:
            pass

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.destroy()


class _Async:
    """Runs a synchronous object's methods in a worker thread, as coroutines."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._inner, name)
        if not callable(fn):
            return fn

        async def call(*args: Any, **kwargs: Any) -> Any:
            return await asyncio.to_thread(fn, *args, **kwargs)

        return call


class AsyncSandbox:
    """:class:`Sandbox` for asyncio: the same methods, awaited; ``async with`` destroys it.

    ``sb = await AsyncSandbox.create(image=...)``; ``await sb.commands.run("ls")``."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sync = sandbox
        self.commands = _Async(sandbox.commands)
        self.files = _Async(sandbox.files)

    @classmethod
    async def create(cls, **kwargs: Any) -> AsyncSandbox:
        return cls(await asyncio.to_thread(Sandbox.create, **kwargs))

    @classmethod
    async def connect(cls, id_or_name: str, *, client: Client | None = None) -> AsyncSandbox:
        return cls(await asyncio.to_thread(Sandbox.connect, id_or_name, client=client))

    @property
    def id(self) -> str:
        return self.sync.id

    @property
    def name(self) -> str:
        return self.sync.name

    async def snapshot(self) -> Deployment:
        return await asyncio.to_thread(self.sync.snapshot)

    async def fork(self, *, name: str | None = None) -> AsyncSandbox:
        return AsyncSandbox(await asyncio.to_thread(self.sync.fork, name=name))

    async def verify(self, *, resume: bool = False) -> dict[str, Any]:
        return await asyncio.to_thread(self.sync.verify, resume=resume)

    async def diff(self, against: str | None = None) -> dict[str, Any]:
        return await asyncio.to_thread(self.sync.diff, against)

    async def port_url(self, port: int, *, service: str | None = None) -> str:
        return await asyncio.to_thread(self.sync.port_url, port, service=service)

    async def destroy(self) -> None:
        await asyncio.to_thread(self.sync.destroy)

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.destroy()
