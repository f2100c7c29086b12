"""A minimal RFC 6455 client (standard library), playing OpenEnv's EnvClient in the tests: it
connects to {base_url}/ws the way convert_to_ws_url does (http -> ws, https -> wss) and exchanges
the session protocol's JSON messages."""

from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import struct
import urllib.parse


class WebSocket:
    def __init__(self, base_url: str, path: str = "/ws", timeout_s: float = 10.0) -> None:
        u = urllib.parse.urlsplit(base_url.rstrip("/") + path)
        port = u.port or (443 if u.scheme == "https" else 80)
        sock = socket.create_connection((u.hostname, port), timeout=timeout_s)
        if u.scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=u.hostname)
        self.sock = sock
        key = base64.b64encode(os.urandom(16)).decode()
        target = u.path + (f"?{u.query}" if u.query else "")
        sock.sendall(
            (
                f"GET {target} HTTP/1.1\r\nHost: {u.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                sock.close()
                raise ConnectionError(f"closed during the handshake: {head!r}")
            head += chunk
        status_line, _, rest = head.partition(b"\r\n")
        self.status = int(status_line.split()[1])
        if self.status != 101:
            sock.close()
            raise ConnectionError(f"upgrade refused: {status_line.decode()}")
        self._buf = rest.partition(b"\r\n\r\n")[2]

    def _recv_exact(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed")
            self._buf += chunk
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def send_frame(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def recv_frame(self) -> tuple[int, bytes]:
        b0, b1 = self._recv_exact(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._recv_exact(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._recv_exact(8))[0]
        return b0 & 0x0F, self._recv_exact(n)

    def send_json(self, msg: object) -> None:
        self.send_frame(1, json.dumps(msg).encode())

    def recv_json(self) -> dict:
        while True:
            op, payload = self.recv_frame()
            if op == 1:
                return json.loads(payload)
            if op == 8:
                raise ConnectionError("closed by the server")

    def ping(self, payload: bytes = b"denv") -> bytes:
        self.send_frame(9, payload)
        while True:
            op, data = self.recv_frame()
            if op == 10:
                return data

    def close(self) -> None:
        try:
            self.send_frame(8, struct.pack("!H", 1000))
        finally:
            self.sock.close()
