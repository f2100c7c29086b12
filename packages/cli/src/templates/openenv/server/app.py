"""An OpenEnv environment whose episodes are forks of a denv version.

Written by `denv export --openenv`. Each session's reset forks the version through the denv API
(a fresh copy of the whole environment, databases and all, in about a second); each step runs the
action's command in the fork's agent service; a step with {"submit": true} grades the fork with
the version's verifier and ends the episode with its reward. The fork is destroyed at the next
reset and when the session closes.

Endpoints as OpenEnv serves them: GET /health, /metadata, /schema, /openapi.json, /state; POST
/reset, /step (stateless: each request forks, acts, and destroys its fork), /mcp (JSON-RPC 2.0);
and the session protocol on WS /ws. Standard library only.

Configuration (environment variables): DENV_SERVER and DENV_API_KEY (required: the key is never
baked into the image), DENV_VERSION (default: the version it was exported from), DENV_SERVICE
(default: the agent's service), PORT (default 8000).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
import urllib.error
import urllib.parse
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CONFIG = json.load(open(os.path.join(os.path.dirname(__file__), "denv.json")))
NAME = CONFIG["name"]
VERSION_REF = os.environ.get("DENV_VERSION") or CONFIG["version"]
SERVICE = os.environ.get("DENV_SERVICE") or CONFIG["service"]
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MAX_OUTPUT = 64 * 1024

SCHEMA = {
    "action": {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "a shell command run in the agent's service"},
            "timeout_s": {"type": "number"},
            "submit": {"type": "boolean", "description": "grade the episode with the verifier; ends it"},
        },
    },
    "observation": {
        "type": "object",
        "properties": {
            "stdout": {"type": "string"},
            "stderr": {"type": "string"},
            "exit_code": {"type": ["integer", "null"]},
            "environment": {"type": ["string", "null"]},
            "instruction": {"type": "string"},
        },
    },
    "state": {
        "type": "object",
        "properties": {
            "episode_id": {"type": ["string", "null"]},
            "step_count": {"type": "integer"},
            "environment": {"type": ["string", "null"]},
            "version": {"type": "string"},
        },
    },
}


class DenvError(Exception):
    pass


def denv(method: str, path: str, body: object | None = None, timeout: float = 600) -> dict:
    server = os.environ.get("DENV_SERVER")
    key = os.environ.get("DENV_API_KEY")
    if not server or not key:
        raise DenvError("set DENV_SERVER and DENV_API_KEY in the container's environment")
    req = urllib.request.Request(
        server.rstrip("/") + path,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            raw = res.read(16 * 1024 * 1024)
            return json.loads(raw) if raw else {}
    except urllib.error.HTTPError as e:
        try:
            err = json.loads(e.read(64 * 1024)).get("error", {})
        except ValueError:
            err = {}
        raise DenvError(f"denv {method} {path}: {err.get('code', e.code)}: {err.get('message', '')}") from None
    except urllib.error.URLError as e:
        raise DenvError(f"denv server unreachable: {e.reason}") from None


class DenvEpisodes:
    """One session's episodes: each reset is a new fork of the version."""

    def __init__(self) -> None:
        self.episode_id: str | None = None
        self.step_count = 0
        self.env_id: str | None = None
        self.done = False

    def close(self) -> None:
        if self.env_id:
            try:
                denv("DELETE", f"/v1/envs/{urllib.parse.quote(self.env_id, safe='')}")
            except DenvError:
                pass
            self.env_id = None

    def reset(self, data: dict) -> dict:
        self.close()
        self.episode_id = str(data.get("episode_id") or uuid.uuid4())
        self.step_count = 0
        self.done = False
        ref = urllib.parse.quote(VERSION_REF, safe="")
        made = denv("POST", f"/v1/versions/{ref}/forks", {"count": 1, "name": f"openenv-{uuid.uuid4().hex[:12]}"})
        fork = (made.get("forks") or [{}])[0]
        if not fork.get("ok"):
            raise DenvError(f"fork failed: {(fork.get('error') or {}).get('message', made)}")
        self.env_id = fork["environment"]["id"]
        obs = {"stdout": "", "stderr": "", "exit_code": None, "environment": self.env_id,
               "instruction": CONFIG.get("instruction", "")}
        return {"observation": obs, "reward": None, "done": False}

    def step(self, action: dict) -> dict:
        if not self.env_id:
            raise ValueError("reset first: there is no episode")
        if self.done:
            raise ValueError("the episode is done; reset for a new one")
        self.step_count += 1
        env = urllib.parse.quote(self.env_id, safe="")
        if action.get("submit") is True:
            d = denv("POST", f"/v1/envs/{env}/verify", {"resume": False})
            verify = d.get("verify") or {}
            self.done = True
            obs = {"stdout": str(verify.get("reason") or ""), "stderr": "", "exit_code": verify.get("exit_code"),
                   "environment": self.env_id}
            return {"observation": obs, "reward": verify.get("reward", 0.0), "done": True}
        command = action.get("command")
        if not isinstance(command, str) or not command:
            raise ValueError("action.command must be a non-empty string (or submit: true)")
        timeout_s = action.get("timeout_s")
        body = {"service": SERVICE, "command": ["sh", "-c", command], "max_output_bytes": MAX_OUTPUT}
        if isinstance(timeout_s, (int, float)) and timeout_s > 0:
            body["timeout_ms"] = int(timeout_s * 1000)
        r = denv("POST", f"/v1/envs/{env}/exec", body)
        obs = {"stdout": r.get("stdout", ""), "stderr": r.get("stderr", ""), "exit_code": r.get("exit_code"),
               "environment": self.env_id}
        return {"observation": obs, "reward": None, "done": False}

    def state(self) -> dict:
        return {"episode_id": self.episode_id, "step_count": self.step_count, "environment": self.env_id,
                "version": VERSION_REF}


def openapi() -> dict:
    ops = {"/health": "get", "/metadata": "get", "/schema": "get", "/reset": "post", "/step": "post",
           "/state": "get", "/mcp": "post"}
    return {
        "openapi": "3.1.0",
        "info": {"title": NAME, "version": CONFIG["version"]},
        "paths": {p: {m: {"responses": {"200": {"description": "ok"}}}} for p, m in ops.items()},
    }


def mcp(req: object) -> dict:
    if not isinstance(req, dict) or req.get("jsonrpc") != "2.0" or "method" not in req:
        return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request"}}
    rid = req.get("id")
    if req["method"] == "tools/list":
        tool = {"name": "run", "description": f"Run a shell command in {NAME}", "inputSchema": SCHEMA["action"]}
        return {"jsonrpc": "2.0", "id": rid, "result": {"tools": [tool]}}
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}}


def stateless(fn) -> dict:
    """OpenEnv's HTTP /reset and /step: a fresh environment per request, closed after it."""
    e = DenvEpisodes()
    try:
        return fn(e)
    finally:
        e.close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: object) -> None:
        pass

    def _json(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> object:
        n = min(int(self.headers.get("content-length") or 0), 1024 * 1024)
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw else {}

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?")[0]
        if path == "/ws" and self.headers.get("upgrade", "").lower() == "websocket":
            return self._websocket()
        routes = {
            "/health": lambda: {"status": "healthy"},
            "/metadata": lambda: {"name": NAME, "description": CONFIG["description"], "version": CONFIG["version"],
                                  "readme_content": CONFIG.get("instruction", "")},
            "/schema": lambda: SCHEMA,
            "/openapi.json": openapi,
            "/state": lambda: DenvEpisodes().state(),
        }
        if path in routes:
            return self._json(200, routes[path]())
        self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?")[0]
        try:
            body = self._body()
        except ValueError:
            return self._json(422, {"detail": "invalid JSON"})
        body = body if isinstance(body, dict) else {}
        try:
            if path == "/reset":
                return self._json(200, stateless(lambda e: e.reset(body)))
            if path == "/step":
                action = body.get("action") if isinstance(body.get("action"), dict) else {}
                return self._json(200, stateless(lambda e: (e.reset({}), e.step(action))[1]))
        except ValueError as e:
            return self._json(422, {"detail": str(e)})
        except DenvError as e:
            return self._json(502, {"detail": str(e)})
        if path == "/mcp":
            return self._json(200, mcp(body))
        self._json(404, {"detail": "Not Found"})

    def _websocket(self) -> None:
        key = self.headers.get("sec-websocket-key", "")
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101, "Switching Protocols")
        self.send_header("upgrade", "websocket")
        self.send_header("connection", "Upgrade")
        self.send_header("sec-websocket-accept", accept)
        self.end_headers()
        self.wfile.flush()
        env = DenvEpisodes()
        try:
            self._session(env)
        finally:
            env.close()

    def _session(self, env: DenvEpisodes) -> None:
        while True:
            frame = self._read_frame()
            if frame is None:
                return
            opcode, payload = frame
            if opcode == 8:
                self._send_frame(8, payload[:2])
                return
            if opcode == 9:
                self._send_frame(10, payload)
                continue
            if opcode != 1:
                continue
            try:
                msg = json.loads(payload)
            except ValueError:
                self._send_json({"type": "error", "data": {"message": "invalid JSON", "code": "INVALID_JSON"}})
                continue
            kind = msg.get("type") if isinstance(msg, dict) else None
            data = (msg.get("data") or {}) if isinstance(msg, dict) else {}
            data = data if isinstance(data, dict) else {}
            try:
                if kind == "reset":
                    self._send_json({"type": "observation", "data": env.reset(data)})
                elif kind == "step":
                    self._send_json({"type": "observation", "data": env.step(data)})
                elif kind == "state":
                    self._send_json({"type": "state", "data": env.state()})
                elif kind == "mcp":
                    self._send_json({"type": "mcp", "data": mcp(data)})
                elif kind == "close":
                    self._send_frame(8, struct.pack("!H", 1000))
                    return
                else:
                    self._send_json({"type": "error", "data": {"message": f"unknown type {kind}", "code": "UNKNOWN_TYPE"}})
            except ValueError as e:
                self._send_json({"type": "error", "data": {"message": str(e), "code": "VALIDATION_ERROR"}})
            except DenvError as e:
                self._send_json({"type": "error", "data": {"message": str(e), "code": "EXECUTION_ERROR"}})

    def _read_exact(self, n: int) -> bytes | None:
        data = self.rfile.read(n)
        return data if data is not None and len(data) == n else None

    def _read_frame(self) -> tuple[int, bytes] | None:
        head = self._read_exact(2)
        if not head:
            return None
        opcode, length = head[0] & 0x0F, head[1] & 0x7F
        masked = head[1] & 0x80
        if length == 126:
            ext = self._read_exact(2)
            length = struct.unpack("!H", ext)[0] if ext else 0
        elif length == 127:
            ext = self._read_exact(8)
            length = struct.unpack("!Q", ext)[0] if ext else 0
        if length > 100 * 1024 * 1024:
            return None
        mask = self._read_exact(4) if masked else b"\0\0\0\0"
        payload = self._read_exact(length) if length else b""
        if mask is None or payload is None:
            return None
        return opcode, bytes(b ^ mask[i % 4] for i, b in enumerate(payload))

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x80 | opcode, 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 127, n)
        self.wfile.write(head + payload)
        self.wfile.flush()

    def _send_json(self, msg: object) -> None:
        self._send_frame(1, json.dumps(msg).encode())


def main() -> None:
    ThreadingHTTPServer(("0.0.0.0", int(os.environ.get("PORT") or 8000)), Handler).serve_forever()


if __name__ == "__main__":
    main()
