"""echo_env: an OpenEnv environment server on the standard library.

Endpoints as OpenEnv's http_server serves them: GET /health, /metadata, /schema, /openapi.json,
/state; POST /reset, /step (stateless, as in OpenEnv: each request builds a fresh environment),
/mcp (JSON-RPC 2.0); and the session protocol on WS /ws (reset, step, state, close; one
environment per connection).
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NAME = "echo_env"
VERSION = "0.1.0"
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

SCHEMA = {
    "action": {"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]},
    "observation": {
        "type": "object",
        "properties": {"echoed": {"type": "string"}, "step": {"type": "integer"}},
    },
    "state": {
        "type": "object",
        "properties": {"episode_id": {"type": ["string", "null"]}, "step_count": {"type": "integer"}},
    },
}


class EchoEnv:
    def __init__(self) -> None:
        self.episode_id: str | None = None
        self.step_count = 0

    def reset(self, data: dict) -> dict:
        self.episode_id = str(data.get("episode_id") or uuid.uuid4())
        self.step_count = 0
        return {"observation": {"echoed": "", "step": 0}, "reward": None, "done": False}

    def step(self, action: dict) -> dict:
        msg = action.get("message")
        if not isinstance(msg, str):
            raise ValueError("action.message must be a string")
        self.step_count += 1
        return {
            "observation": {"echoed": msg, "step": self.step_count},
            "reward": len(msg) / 10,
            "done": msg == "bye",
        }

    def state(self) -> dict:
        return {"episode_id": self.episode_id, "step_count": self.step_count}


def openapi() -> dict:
    ops = {"/health": "get", "/metadata": "get", "/schema": "get", "/reset": "post", "/step": "post",
           "/state": "get", "/mcp": "post"}
    return {
        "openapi": "3.1.0",
        "info": {"title": NAME, "version": VERSION},
        "paths": {p: {m: {"responses": {"200": {"description": "ok"}}}} for p, m in ops.items()},
    }


def mcp(req: object) -> dict:
    if not isinstance(req, dict) or req.get("jsonrpc") != "2.0" or "method" not in req:
        return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request"}}
    rid = req.get("id")
    if req["method"] == "tools/list":
        tool = {"name": "echo", "description": "Echo a message", "inputSchema": SCHEMA["action"]}
        return {"jsonrpc": "2.0", "id": rid, "result": {"tools": [tool]}}
    if req["method"] == "tools/call":
        args = (req.get("params") or {}).get("arguments") or {}
        text = str(args.get("message", ""))
        return {"jsonrpc": "2.0", "id": rid, "result": {"content": [{"type": "text", "text": text}]}}
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "Method not found"}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: object) -> None:  # quiet
        pass

    def _json(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> object:
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw else {}

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?")[0]
        if path == "/ws" and self.headers.get("upgrade", "").lower() == "websocket":
            return self._websocket()
        routes = {
            "/health": lambda: {"status": "healthy"},
            "/metadata": lambda: {"name": NAME, "description": "Echoes each action's message", "version": VERSION},
            "/schema": lambda: SCHEMA,
            "/openapi.json": openapi,
            "/state": lambda: EchoEnv().state(),
            # Not part of OpenEnv: what a request carried, so tests can see what reaches the env.
            "/debug/headers": lambda: {k.lower(): v for k, v in self.headers.items()},
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
        if path == "/reset":
            return self._json(200, EchoEnv().reset(body if isinstance(body, dict) else {}))
        if path == "/step":
            action = body.get("action") if isinstance(body, dict) else None
            try:
                return self._json(200, EchoEnv().step(action if isinstance(action, dict) else {}))
            except ValueError as e:
                return self._json(422, {"detail": str(e)})
        if path == "/mcp":
            return self._json(200, mcp(body))
        self._json(404, {"detail": "Not Found"})

    # --- WebSocket session (RFC 6455, text frames) ---

    def _websocket(self) -> None:
        key = self.headers.get("sec-websocket-key", "")
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        self.send_response(101, "Switching Protocols")
        self.send_header("upgrade", "websocket")
        self.send_header("connection", "Upgrade")
        self.send_header("sec-websocket-accept", accept)
        self.end_headers()
        self.wfile.flush()
        env = EchoEnv()
        while True:
            frame = self._read_frame()
            if frame is None:
                return
            opcode, payload = frame
            if opcode == 8:  # close
                self._send_frame(8, payload[:2])
                return
            if opcode == 9:  # ping
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
            data = msg.get("data") or {} if isinstance(msg, dict) else {}
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
    ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()


if __name__ == "__main__":
    main()
