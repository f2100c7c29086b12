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
