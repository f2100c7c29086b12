"""One service of one denv environment, as the adapters see it: exec and files with the exception
types frameworks expect. Framework-independent and synchronous; the adapters run it in threads.

Files go through denv's files API *as the sandbox's user* (the service's own unless one is named):
the agent in the container reads and writes them with that user's rights, so a file the user may
not read raises PermissionError exactly as it would for a process inside the sandbox, a write over
a directory raises IsADirectoryError, and parents are made. Bytes stream both ways; a read stops at
the tar header when the file is over the caller's limit.
"""

from __future__ import annotations

import errno
import io
import posixpath
import tarfile
from dataclasses import dataclass

from .client import Client, ExecOutput
from .errors import DenvError

class SandboxGoneError(RuntimeError):
    """The environment (or its service) is no longer there to run commands in."""


class FileTooLargeError(Exception):
    def __init__(self, path: str, size: int, limit: int) -> None:
        super().__init__(f"{path} is {size} bytes, over the {limit}-byte limit")
        self.size = size
        self.limit = limit


@dataclass
class Session:
    client: Client
    env_id: str
    service: str | None = None
    #: The user commands run as when a call names none (None: the service's own user).
    user: str | None = None
    #: Where the service's commands start (relative paths are resolved against it).
    _cwd: str | None = None

    def exec(
        self,
        command: list[str] | str,
        *,
        stdin: bytes | str | None = None,
        cwd: str | None = None,
        env_vars: dict[str, str] | None = None,
        user: str | None = None,
        timeout_s: float | None = None,
        max_output_bytes: int | None = None,
    ) -> ExecOutput:
        try:
            return self.client.exec(
                self.env_id,
                command,
                service=self.service,
                user=user if user is not None else self.user,
                cwd=cwd,
                env_vars=env_vars,
                stdin=stdin,
                timeout_ms=None if timeout_s is None else max(1, int(timeout_s * 1000)),
                max_output_bytes=max_output_bytes,
            )
        except DenvError as e:
            if e.code in ("not_found", "unavailable", "conflict"):
                raise SandboxGoneError(f"environment {self.env_id}: {e.message}") from e
            raise

    # --- files --------------------------------------------------------------------------------

    def write_file(self, path: str, data: bytes, *, user: str | None = None) -> None:
        path = self._absolute(path, user)
        if path.endswith("/"):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
        info = tarfile.TarInfo(posixpath.basename(path))
        info.size = len(data)
        info.mode = 0o644
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
            tf.addfile(info, io.BytesIO(data))
        buf.seek(0)
        try:
            self.client.put_tar(
                self.env_id, posixpath.dirname(path), buf, service=self.service, user=self._who(user)
            )
        except DenvError as e:
            raise self._os_error(e, path) from None

    def read_file(self, path: str, *, limit_bytes: int, user: str | None = None) -> bytes:
        path = self._absolute(path, user)
        who = self._who(user)
        try:
            # What it is first: a directory, a link, or a file over the limit is answered from here.
            entry = self.client.stat(self.env_id, path, service=self.service, user=who)
            if entry["type"] == "directory":
                raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
            if entry["type"] == "symlink":
                # denv's files API never follows a link; a process in the sandbox would, with the
                # user's rights: so read it as one does.
                return self._read_through_link(path, limit_bytes, user)
            if entry["type"] != "file":
                raise PermissionError(errno.EACCES, "Not a regular file", path)
            if entry["size"] > limit_bytes:
                raise FileTooLargeError(path, int(entry["size"]), limit_bytes)
            res = self.client.get_tar_stream(self.env_id, path, service=self.service, user=who)
        except DenvError as e:
            raise self._os_error(e, path) from None
        with res, tarfile.open(fileobj=res, mode="r|") as tf:
            member = next(iter(tf), None)
            if member is None or not member.isfile():
                raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
            if member.size > limit_bytes:  # it grew since the stat
                raise FileTooLargeError(path, member.size, limit_bytes)
            f = tf.extractfile(member)
            return f.read() if f else b""

    def _read_through_link(self, path: str, limit_bytes: int, user: str | None) -> bytes:
        r = self.exec(["cat", "--", path], user=user, timeout_s=600, max_output_bytes=limit_bytes + 1)
        if r.exit_code == 0 and len(r.stdout) > limit_bytes:
            raise FileTooLargeError(path, len(r.stdout), limit_bytes)
        if r.exit_code != 0:
            detail = r.stderr.decode(errors="replace")
            if "Permission denied" in detail:
                raise PermissionError(errno.EACCES, "Permission denied", path)
            if "Is a directory" in detail:
                raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        return r.stdout

    def _absolute(self, path: str, user: str | None) -> str:
        """A relative path is the sandbox's: relative to where its commands start (asked once)."""
        if path.startswith("/"):
            return path
        if self._cwd is None:
            r = self.exec(["pwd"], user=user, timeout_s=60)
            self._cwd = r.stdout.decode(errors="replace").strip() or "/"
        return posixpath.normpath(posixpath.join(self._cwd, path)) + ("/" if path.endswith("/") else "")

    def _who(self, user: str | None) -> str | None:
        return user if user is not None else self.user

    def _os_error(self, e: DenvError, path: str) -> Exception:
        """denv's file error codes as the OSError a process in the sandbox would have seen; a missing
        environment or service is the sandbox being gone."""
        about_path = path in e.message
        if e.code == "permission_denied":
            return PermissionError(errno.EACCES, "Permission denied", path)
        if e.code == "is_directory":
            return IsADirectoryError(errno.EISDIR, "Is a directory", path)
        if e.code == "not_a_directory":
            return NotADirectoryError(errno.ENOTDIR, "Not a directory", path)
        if e.code == "not_found" and about_path:
            return FileNotFoundError(errno.ENOENT, "No such file or directory", path)
        if e.code == "payload_too_large":
            return FileTooLargeError(path, -1, -1)
        if e.code in ("not_found", "unavailable", "conflict"):
            return SandboxGoneError(f"environment {self.env_id}: {e.message}")
        return e


