"""The live denv every conformance suite runs against: one server and one denvd (real engine, real
btrfs pool), started once per test process by test/harness/live-denv.ts and stopped at exit."""

from __future__ import annotations

import atexit
import json
import os
import shlex
import tempfile
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python" / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "frameworks"))

#: The opsbox image of examples/ops-world: Debian with bash, procps, adduser, user ubuntu (1000).
OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm"
EXAMPLES = ROOT / "examples"

_lock = threading.Lock()
_live: dict[str, str] | None = None
_proc: subprocess.Popen[bytes] | None = None


def live() -> dict[str, str]:
    """{server, api_key}; DENV_SERVER/DENV_API_KEY are set for the adapters to find."""
    global _live, _proc
    with _lock:
        if _live is None:
            _proc = subprocess.Popen(
                [os.environ.get("DENV_NODE", "node"), str(ROOT / "test" / "harness" / "live-denv.ts")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                cwd=ROOT,
            )
            assert _proc.stdout is not None
            line = _proc.stdout.readline()
            if not line:
                raise RuntimeError(f"test/harness/live-denv.ts exited ({_proc.wait()}) before it was ready")
            _live = json.loads(line)
            os.environ["DENV_SERVER"] = _live["server"]
            os.environ["DENV_API_KEY"] = _live["api_key"]
            # The Harbor adapter deploys environment directories through the CLI, keeping them in
            # the cache: a directory of this run's own.
            os.environ["DENV_CACHE_DIR"] = tempfile.mkdtemp(prefix="denv-cache-")
            os.environ.setdefault(
                "DENV_CLI", shlex.join([os.environ.get("DENV_NODE", "node"), str(ROOT / "packages" / "cli" / "bin" / "denv.js")])
            )
            atexit.register(_stop)
        return _live


def _stop() -> None:
    if _proc and _proc.poll() is None:
        assert _proc.stdin is not None
        _proc.stdin.close()  # the launcher removes what it made, then exits
        try:
            _proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            _proc.kill()


def import_without_frameworks(module: str) -> str:
    """Imports `module` in a fresh interpreter that sees the package but no framework (not even
    the stand-ins); returns what it printed: the ImportError's text, or "imported"."""
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT / 'python' / 'src')!r})\n"
        f"try:\n    import {module}\n    print('imported')\nexcept ImportError as e:\n    print(e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout.strip()


def client():  # noqa: ANN201
    from denv import Client

    info = live()
    return Client(info["server"], info["api_key"])
