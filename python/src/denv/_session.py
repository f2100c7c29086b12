"""One service of one denv environment, as the adapters see it: exec and files with the exception
types frameworks expect. Framework-independent and synchronous; the adapters run it in threads.

Files are read and written by commands run *as the sandbox's user* (not through the root-side tar
API), so the permission answers are the ones that user would get: a file the agent cannot read
raises PermissionError, exactly as it would for a process inside the sandbox.
"""

from __future__ import annotations

import errno
import shlex
from dataclasses import dataclass

from .client import Client, ExecOutput
from .errors import DenvError

#: Payload per exec round trip. The server takes 80 MiB of base64 per request (about 60 MiB raw);
#: larger files move in several commands.
CHUNK_BYTES = 32 * 1024 * 1024

# Exit codes of the helper scripts below (the errno values they stand for).
_ENOENT, _EACCES, _EISDIR, _EFBIG = 2, 13, 21, 27

# Writes stdin to "$1", creating parent directories; "$2" is "append" for the chunks after the
# first. Checks are made as the caller's user so their answers match what that user may do.
_WRITE = r"""
f=$1
if [ -d "$f" ]; then exit 21; fi
d=$(dirname -- "$f")
if [ ! -d "$d" ]; then mkdir -p -- "$d" 2>/dev/null || exit 13; fi
if [ -e "$f" ] && [ ! -w "$f" ]; then exit 13; fi
if [ ! -e "$f" ] && [ ! -w "$d" ]; then exit 13; fi
if [ "$2" = append ]; then cat >>"$f" || exit 13; else cat >"$f" || exit 13; fi
"""

# Prints the size of "$1" on stderr, then its bytes when they fit in "$2" (and in one chunk).
_READ = r"""
f=$1
if [ -d "$f" ]; then exit 21; fi
if [ ! -e "$f" ]; then exit 2; fi
if [ ! -r "$f" ]; then exit 13; fi
s=$(wc -c <"$f") || exit 13
echo "$s" >&2
if [ "$s" -gt "$2" ]; then exit 27; fi
if [ "$s" -le "$3" ]; then exec cat -- "$f"; fi
"""


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
        chunks = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
        for i, chunk in enumerate(chunks):
            r = self.exec(
                ["sh", "-c", _WRITE, "denv-write", path, "append" if i else "create"],
                stdin=chunk,
                user=user,
                timeout_s=600,
            )
            _raise_for(r, path)

    def read_file(self, path: str, *, limit_bytes: int, user: str | None = None) -> bytes:
        r = self.exec(
            ["sh", "-c", _READ, "denv-read", path, str(limit_bytes), str(CHUNK_BYTES)],
            user=user,
            timeout_s=600,
            max_output_bytes=CHUNK_BYTES + 1,
        )
        if r.exit_code == _EFBIG:
            raise FileTooLargeError(path, _size(r), limit_bytes)
        _raise_for(r, path)
        size = _size(r)
        if size <= CHUNK_BYTES:
            return r.stdout
        parts: list[bytes] = []
        for off in range(0, size, CHUNK_BYTES):
            n = min(CHUNK_BYTES, size - off)
            q = shlex.quote(path)
            c = self.exec(
                f"tail -c +{off + 1} -- {q} | head -c {n}",
                user=user,
                timeout_s=600,
                max_output_bytes=n,
            )
            _raise_for(c, path)
            parts.append(c.stdout)
        return b"".join(parts)


def _size(r: ExecOutput) -> int:
    try:
        return int(r.stderr.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return 0


def _raise_for(r: ExecOutput, path: str) -> None:
    if r.timed_out:
        raise TimeoutError(f"moving {path} did not finish in time")
    if r.exit_code == 0:
        return
    if r.exit_code == _ENOENT:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", path)
    if r.exit_code == _EACCES:
        raise PermissionError(errno.EACCES, "Permission denied", path)
    if r.exit_code == _EISDIR:
        raise IsADirectoryError(errno.EISDIR, "Is a directory", path)
    detail = r.stderr.decode(errors="replace").strip()
    if "unable to find user" in detail:
        raise PermissionError(errno.EACCES, detail, path)
    raise OSError(errno.EIO, f"exit {r.exit_code}: {detail[-500:]}", path)
