"""Unit tests of the package's pure logic (no denv needed): compose helpers, the client's error
mapping (against a real local HTTP server speaking the error shape), and configuration."""

from __future__ import annotations

import json
import os
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import live  # noqa: F401  (puts python/src on sys.path)
from denv import ERROR_CODES, Client, DenvError
from denv._compose import default_service, kind_of, project_name, with_denv_block
from denv._inspect_core import sample_metadata_env


class ComposeHelpers(unittest.TestCase):
    def test_denv_block_added_once(self) -> None:
        text = "services:\n  default:\n    image: x\n"
        marked = with_denv_block(text, egress="deny")
        self.assertTrue(marked.startswith("x-denv:\n  kind: agent\n  egress: deny\n"))
        self.assertEqual(with_denv_block(marked), marked)
        as_json = json.loads(with_denv_block(json.dumps({"services": {"a": {"image": "x"}}})))
        self.assertEqual(as_json["x-denv"], {"kind": "agent"})

    def test_kind(self) -> None:
        self.assertEqual(kind_of("x-denv:\n  egress: deny\n  kind: rl-environment\nservices: {}\n"), "rl-environment")
        self.assertEqual(kind_of("services:\n  kind: nope\n"), "agent")

    def test_default_service_rules(self) -> None:
        marked = "services:\n  aux:\n    image: a\n  box:\n    image: b\n    x-default: true\n  default:\n    image: c\n"
        self.assertEqual(default_service(marked, ["aux", "box", "default"]), "box")
        self.assertEqual(default_service("services: {}\n", ["aux", "default"]), "default")
        self.assertEqual(default_service("services: {}\n", ["only"]), "only")
        with self.assertRaisesRegex(RuntimeError, "x-default: true"):
            default_service("services: {}\n", ["a", "b"])

    def test_project_names_follow_content(self) -> None:
        a, b = project_name("inspect", "x"), project_name("inspect", "y")
        self.assertNotEqual(a, b)
        self.assertEqual(a, project_name("inspect", "x"))
        self.assertRegex(a, r"^inspect-[0-9a-f]{12}$")

    def test_sample_metadata_env(self) -> None:
        self.assertEqual(sample_metadata_env({"memory limit": 2, "k": "v"}),
                         {"SAMPLE_METADATA_MEMORY_LIMIT": "2", "SAMPLE_METADATA_K": "v"})


class _Errors(BaseHTTPRequestHandler):
    def log_message(self, *a: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        if self.headers.get("authorization") != "Bearer k":
            body, status = {"error": {"code": "unauthenticated", "message": "this API key is not valid"}}, 401
        elif self.path.startswith("/v1/envs/"):
            body, status = {"error": {"code": "not_found", "message": "no environment x", "details": {"a": 1}}}, 404
        else:
            body, status = {"projects": []}, 200
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class ClientErrors(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.srv = ThreadingHTTPServer(("127.0.0.1", 0), _Errors)
        threading.Thread(target=cls.srv.serve_forever, daemon=True).start()
        cls.url = f"http://127.0.0.1:{cls.srv.server_address[1]}"

    @classmethod
    def tearDownClass(cls) -> None:
        cls.srv.shutdown()
        cls.srv.server_close()

    def test_codes_from_the_server(self) -> None:
        c = Client(self.url, "k")
        self.assertEqual(c.projects(), [])
        with self.assertRaises(DenvError) as cm:
            c.env("x")
        self.assertEqual((cm.exception.code, cm.exception.status, cm.exception.details), ("not_found", 404, {"a": 1}))
        with self.assertRaises(DenvError) as cm:
            Client(self.url, "wrong").projects()
        self.assertEqual(cm.exception.code, "unauthenticated")
        self.assertIn(cm.exception.code, ERROR_CODES)

    def test_unreachable_server(self) -> None:
        port = self.srv.server_address[1]
        dead = ThreadingHTTPServer(("127.0.0.1", 0), _Errors)
        free = dead.server_address[1]
        dead.server_close()
        # The premise: nothing answers there now (a connect is refused), while our server's port does.
        import socket

        with self.assertRaises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", free), timeout=2).close()
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        with self.assertRaises(DenvError) as cm:
            Client(f"http://127.0.0.1:{free}", "k").projects()
        self.assertEqual(cm.exception.code, "unavailable")

    def test_no_configuration(self) -> None:
        saved = {k: os.environ.pop(k, None) for k in ("DENV_SERVER", "DENV_API_KEY", "DENV_CONFIG")}
        os.environ["DENV_CONFIG"] = "/nonexistent/denv.json"
        try:
            with self.assertRaisesRegex(DenvError, "denv login"):
                Client()
        finally:
            os.environ.pop("DENV_CONFIG")
            for k, v in saved.items():
                if v is not None:
                    os.environ[k] = v

    def test_sandbox_arguments(self) -> None:
        with self.assertRaisesRegex(DenvError, "exactly one"):
            Client(self.url, "k").sandbox()



class _Recorder(BaseHTTPRequestHandler):
    """Answers every request with what it received: method, path, query and body."""

    def log_message(self, *a: object) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        got = self.rfile.read(length) if length else b""
        body = {"method": self.command, "path": self.path, "type": self.headers.get("content-type"), "body": got.decode()}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = _answer  # noqa: N815


class NamedMethods(unittest.TestCase):
    """The generated methods (client.api.<group>.<verb>) send what their route takes."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.srv = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
        threading.Thread(target=cls.srv.serve_forever, daemon=True).start()
        cls.client = Client(f"http://127.0.0.1:{cls.srv.server_address[1]}", "k")

    @classmethod
    def tearDownClass(cls) -> None:
        cls.srv.shutdown()
        cls.srv.server_close()

    def test_path_parameters_are_one_segment_each(self) -> None:
        got = self.client.api.envs.fork("shop/alpha", {"name": "try 2"})
        self.assertEqual((got["method"], got["path"]), ("POST", "/v1/envs/shop%2Falpha/fork"))
        self.assertEqual(json.loads(got["body"]), {"name": "try 2"})
        got = self.client.api.envs.open_port("../../v1/keys", "8080", {})
        self.assertEqual(got["path"], "/v1/envs/..%2F..%2Fv1%2Fkeys/ports/8080")

    def test_an_optional_body_is_sent_empty_and_none_query_values_are_left_out(self) -> None:
        got = self.client.api.envs.verify("e")
        self.assertEqual(json.loads(got["body"]), {})
        got = self.client.api.versions.list(query={"project": None})
        self.assertEqual(got["path"], "/v1/versions")
        got = self.client.api.files.stat("e", query={"path": "/w/a b", "service": None})
        self.assertEqual(got["path"], "/v1/envs/e/files/stat?path=%2Fw%2Fa+b")

    def test_a_tar_body_goes_as_bytes(self) -> None:
        got = self.client.api.files.write("e", b"tar-bytes", query={"path": "/w"})
        self.assertEqual((got["method"], got["type"], got["body"]), ("PUT", "application/x-tar", "tar-bytes"))

    def test_no_route_path_is_written_by_hand_in_the_package(self) -> None:
        src = os.path.join(os.path.dirname(__file__), "..", "src", "denv")
        for name in sorted(os.listdir(src)):
            if not name.endswith(".py") or name in ("_api_methods.py", "_api_types.py"):
                continue
            with open(os.path.join(src, name), encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    code = line.split("#", 1)[0]
                    if '"/v1/' in code or "f\"/v1/" in code or "}/v1/" in code:
                        self.fail(f"{name}:{n} writes a route's path: use client.api or path_of\n{line}")


if __name__ == "__main__":
    unittest.main()


class Packaging(unittest.TestCase):
    def test_wheel_declares_extras_and_the_inspect_entry_point(self) -> None:
        import shutil
        import subprocess
        import sys
        import tempfile
        from pathlib import Path

        src = Path(__file__).resolve().parents[1]
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "pkg"
            shutil.copytree(src, copy, ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"))
            subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", str(copy), "-w", tmp],
                check=True,
                capture_output=True,
            )
            wheel = next(Path(tmp).glob("denv-*.whl"))
            target = Path(tmp) / "site"
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(target), str(wheel)],
                check=True,
                capture_output=True,
            )
            # The installed distribution, found the way Inspect finds providers: its entry points.
            probe = (
                "import sys; from importlib.metadata import entry_points, distribution\n"
                "eps = [e for e in entry_points(group='inspect_ai') if e.name == 'denv']\n"
                "print(eps[0].value)\n"
                "mod = eps[0].load()\n"
                "from inspect_ai.util import registry_find_sandboxenv\n"
                "print(registry_find_sandboxenv('denv').__name__)\n"
                "print(sorted(distribution('denv').metadata.get_all('Provides-Extra')))\n"
            )
            frameworks = str(Path(__file__).resolve().parent / "frameworks")
            out = subprocess.run(
                [sys.executable, "-c", probe],
                capture_output=True,
                text=True,
                env={**os.environ, "PYTHONPATH": f"{target}:{frameworks}"},
                cwd=tmp,
            )
            self.assertEqual(
                out.stdout.splitlines(),
                ["denv._registry", "DenvSandboxEnvironment", "['all', 'harbor', 'inspect', 'openenv']"],
                out.stderr,
            )
