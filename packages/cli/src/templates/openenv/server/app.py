"""An OpenEnv environment whose episodes are forks of a denv version.

Written by `denv export --openenv`. Each session's reset forks the version through the denv API
(a fresh copy of the whole environment, databases and all, in about a second); each step runs the
action's command in the fork's agent service; a step with {"submit": true} grades the fork with
the version's verifier and ends the episode with its reward. The fork is destroyed at the next
reset and when the session closes.

Endpoints as OpenEnv serves them: GET /health, /metadata, /schema, /openapi.json, /state; POST
/reset, /step (stateless: each request forks, acts, and destroys its fork), /mcp (MCP over JSON-RPC
2.0: initialize, ping, tools/list, tools/call, and OpenEnv's openenv/session/create|close, whose
session keeps one episode across calls); and the session protocol on WS /ws, where a step may also
be one of OpenEnv's MCP actions ({"type": "list_tools"} needs no reset; {"type": "call_tool"}
starts an episode when there is none) and {"type": "mcp"} carries JSON-RPC. The tools: run
(a shell command in the episode's fork) and submit (grade it; the episode ends). Standard library
only.

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
import threading
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


PROTOCOL_VERSION = "2025-06-18"
TOOLS = [
    {
        "name": "run",
        "description": f"Run a shell command in {SERVICE}, in this episode's fork of {NAME}",
        "inputSchema": {
            "type": "object",
            "properties": {"command": {"type": "string"}, "timeout_s": {"type": "number"}},
            "required": ["command"],
        },
    },
    {
        "name": "submit",
        "description": "Grade the episode with the version's verifier; the episode ends with its reward",
        "inputSchema": {"type": "object", "properties": {}},
    },
]
#: Open MCP sessions over HTTP (each may hold a fork): bounded, so a client cannot hold every host.
MAX_SESSIONS = int(os.environ.get("DENV_MAX_SESSIONS") or 16)
SESSIONS: dict[str, "DenvEpisodes"] = {}
SESSIONS_LOCK = threading.Lock()


class DenvError(Exception):
    pass


class McpError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


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

    def call_tool(self, name: object, arguments: object) -> tuple[dict, object, bool]:
        """(MCP CallToolResult, reward, done). An episode is started when there is none: MCP's
        clients call tools without a reset. Failures of the command are the result's, not errors."""
        args = arguments if isinstance(arguments, dict) else {}
        if name not in ("run", "submit"):
            raise McpError(-32602, f"unknown tool {name!r}; the tools are run and submit")
        if name == "run" and (not isinstance(args.get("command"), str) or not args["command"]):
            raise McpError(-32602, "run: arguments.command must be a non-empty string")
        if not self.env_id or self.done:
            self.reset({})
        out = self.step({"submit": True} if name == "submit" else args)
        obs = out["observation"]
        data = {k: v for k, v in obs.items() if k in ("stdout", "stderr", "exit_code", "environment")}
        if name == "submit":
            data = {"reward": out["reward"], "reason": obs["stdout"], "environment": self.env_id}
        text = json.dumps(data)
        failed = name == "run" and obs.get("exit_code") != 0
        result = {"content": [{"type": "text", "text": text}], "structuredContent": data, "data": data,
                  "isError": failed}
        return result, out["reward"], out["done"]

    def mcp_step(self, action: dict) -> dict | None:
        """OpenEnv's MCP actions sent as a step: ListToolsAction and CallToolAction."""
        if action.get("type") == "list_tools":
            return {"observation": {"tools": TOOLS}, "reward": None, "done": False}
        if action.get("type") != "call_tool":
            return None
        name = action.get("tool_name")
        try:
            result, reward, done = self.call_tool(name, action.get("arguments"))
            return {"observation": {"tool_name": name, "result": result, "error": None}, "reward": reward,
                    "done": done}
        except McpError as e:
            kind = "tool_not_found" if "unknown tool" in str(e) else "invalid_args"
            error = {"error_type": kind, "message": str(e)}
        except DenvError as e:
            error = {"error_type": "execution_error", "message": str(e)}
        return {"observation": {"tool_name": name, "result": None, "error": error}, "reward": None, "done": False}


def openapi() -> dict:
    ops = {"/health": "get", "/metadata": "get", "/schema": "get", "/reset": "post", "/step": "post",
           "/state": "get", "/mcp": "post"}
    return {
        "openapi": "3.1.0",
        "info": {"title": NAME, "version": CONFIG["version"]},
        "paths": {p: {m: {"responses": {"200": {"description": "ok"}}}} for p, m in ops.items()},
    }


def mcp(req: object, episodes: DenvEpisodes | None = None) -> dict | None:
    """One JSON-RPC request (None for a notification). `episodes`: the WebSocket session's; over
    HTTP a tools/call uses its openenv session's, else a fork made for the call and removed after."""
    if not isinstance(req, dict) or req.get("jsonrpc") != "2.0" or not isinstance(req.get("method"), str):
        return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request"}}
    rid, method = req.get("id"), req["method"]
    params = req.get("params") if isinstance(req.get("params"), dict) else {}
    if "id" not in req:
        return None  # a notification (notifications/initialized, …): no answer
    try:
        return {"jsonrpc": "2.0", "id": rid, "result": _mcp_result(method, params, episodes)}
    except McpError as e:
        return {"jsonrpc": "2.0", "id": rid, "error": {"code": e.code, "message": str(e)}}
    except DenvError as e:
        return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32000, "message": str(e)}}


def _mcp_result(method: str, params: dict, episodes: DenvEpisodes | None) -> dict:
    if method == "initialize":
        asked = params.get("protocolVersion")
        return {"protocolVersion": asked if isinstance(asked, str) else PROTOCOL_VERSION,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": NAME, "version": CONFIG["version"]}}
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "openenv/session/create":
        with SESSIONS_LOCK:
            if len(SESSIONS) >= MAX_SESSIONS:
                raise McpError(-32000, f"{MAX_SESSIONS} sessions are open; close one first")
            sid = uuid.uuid4().hex
            SESSIONS[sid] = DenvEpisodes()
        return {"session_id": sid}
    if method == "openenv/session/close":
        with SESSIONS_LOCK:
            gone = SESSIONS.pop(str(params.get("session_id")), None)
        if gone:
            gone.close()
        return {"closed": gone is not None}
    if method == "tools/call":
        if episodes is not None:
            return episodes.call_tool(params.get("name"), params.get("arguments"))[0]
        sid = params.get("session_id")
        if sid is not None:
            with SESSIONS_LOCK:
                session = SESSIONS.get(str(sid))
            if session is None:
                raise McpError(-32602, f"no session {sid}; create one with openenv/session/create")
            return session.call_tool(params.get("name"), params.get("arguments"))[0]
        return stateless(lambda e: e.call_tool(params.get("name"), params.get("arguments"))[0])
    raise McpError(-32601, f"Method not found: {method}")


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
            raw = self._body()
        except ValueError:
            if path == "/mcp":
                return self._json(200, {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
            return self._json(422, {"detail": "invalid JSON"})
        body = raw if isinstance(raw, dict) else {}
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
            answer = mcp(body)
            if answer is None:  # a notification: accepted, nothing to say
                self.send_response(202)
                self.send_header("content-length", "0")
                return self.end_headers()
            return self._json(200, answer)
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
                    out = env.mcp_step(data)
                    self._send_json({"type": "observation", "data": out if out is not None else env.step(data)})
                elif kind == "state":
                    self._send_json({"type": "state", "data": env.state()})
                elif kind == "mcp":
                    answer = mcp(msg.get("data"), env)
                    if answer is not None:
                        self._send_json({"type": "mcp", "data": answer})
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
