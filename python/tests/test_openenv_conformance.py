"""OpenEnv conformance: denv.openenv.DenvProvider through OpenEnv's provider lifecycle
(OpenEnv's provider and client contract): the source stored at construction and
start_container() with no image (provider-owned startup), extra keyword arguments tolerated and
wait_timeout honoured, wait_for_ready on /health, `openenv validate --url`'s six runtime criteria
through the returned base URL, a real WebSocket reset -> step -> state round trip (RFC 002: "the
WebSocket transport is the conformance test"), an idempotent stop_container, close(), and a failed
start that leaves nothing behind."""

from __future__ import annotations

import json
import os
import unittest
import urllib.error
import urllib.request

from live import client, import_without_frameworks, live
from ws_client import WebSocket

ECHO = "127.0.0.1:5000/denv/openenv-echo:0.1"


def get(url: str, *, method: str = "GET", body: object | None = None) -> tuple[int, object]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            return res.status, json.loads(res.read() or b"null")
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw


def validate_running_environment(base_url: str) -> dict[str, bool]:
    """`openenv validate --url`'s six required criteria, as the reference lists them."""
    out: dict[str, bool] = {}
    s, doc = get(f"{base_url}/openapi.json")
    out["openapi_version_available"] = s == 200 and isinstance(doc, dict) and bool(doc.get("info", {}).get("version"))
    s, h = get(f"{base_url}/health")
    out["health_endpoint"] = s == 200 and isinstance(h, dict) and h.get("status") == "healthy"
    s, m = get(f"{base_url}/metadata")
    out["metadata_endpoint"] = s == 200 and isinstance(m, dict) and all(isinstance(m.get(k), str) for k in ("name", "description"))
    s, sc = get(f"{base_url}/schema")
    out["schema_endpoint"] = s == 200 and isinstance(sc, dict) and all(isinstance(sc.get(k), dict) for k in ("action", "observation", "state"))
    s, mc = get(f"{base_url}/mcp", method="POST", body={})
    out["mcp_endpoint"] = s == 200 and isinstance(mc, dict) and mc.get("jsonrpc") == "2.0"
    paths = set((doc or {}).get("paths", {})) if isinstance(doc, dict) else set()
    sim = {"/reset", "/step", "/state"}
    out["mode_endpoint_consistency"] = sim <= paths or not (sim & paths)
    return out


class OpenEnvProviderLifecycle(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        live()
        from denv.openenv import DenvProvider

        cls.P = DenvProvider

    def test_provider_owned_startup_validate_and_websocket_round_trip(self) -> None:
        p = self.P(ECHO)
        # OpenEnv's newer client: start_container() with no image; AutoEnv passes wait_timeout.
        base_url = p.start_container(wait_timeout=45.0, replicas=3)
        try:
            # A port URL: on the server's ports origin, never the API's (and console's) own.
            self.assertTrue(base_url.startswith("http://localhost:"), base_url)
            self.assertFalse(base_url.startswith(os.environ["DENV_SERVER"]), base_url)
            self.assertRegex(base_url, r"/v1/tunnels/dpu[a-z2-7]{32}$")
            p.wait_for_ready(base_url)  # default timeout, as from_docker_image calls it
            self.assertEqual(
                validate_running_environment(base_url),
                {k: True for k in ("openapi_version_available", "health_endpoint", "metadata_endpoint",
                                   "schema_endpoint", "mcp_endpoint", "mode_endpoint_consistency")},
            )
            # Simulation HTTP endpoints are stateless; 422 on an invalid action.
            s, r = get(f"{base_url}/step", method="POST", body={"action": {"message": "x"}})
            self.assertEqual((s, r["observation"]["echoed"]), (200, "x"))
            self.assertEqual(get(f"{base_url}/step", method="POST", body={"action": {}})[0], 422)
            # The session protocol over /ws: reset -> step -> state -> close.
            ws = WebSocket(base_url)
            ws.send_json({"type": "reset", "data": {"episode_id": "ep-1"}})
            obs = ws.recv_json()
            self.assertEqual(obs["type"], "observation")
            self.assertEqual(obs["data"]["observation"], {"echoed": "", "step": 0})
            ws.send_json({"type": "step", "data": {"message": "hello denv"}})
            obs = ws.recv_json()
            self.assertEqual(obs["data"]["observation"], {"echoed": "hello denv", "step": 1})
            self.assertEqual(obs["data"]["reward"], 1.0)
            self.assertFalse(obs["data"]["done"])
            big = "y" * 200_000  # frames larger than one relay chunk
            ws.send_json({"type": "step", "data": {"message": big}})
            self.assertEqual(ws.recv_json()["data"]["observation"]["echoed"], big)
            self.assertEqual(ws.ping(b"keepalive"), b"keepalive")  # pings pass through
            ws.send_json({"type": "state"})
            self.assertEqual(ws.recv_json(), {"type": "state", "data": {"episode_id": "ep-1", "step_count": 2}})
            ws.send_json({"type": "nonsense"})
            self.assertEqual(ws.recv_json()["data"]["code"], "UNKNOWN_TYPE")
            ws.close()
            # Each connection is its own session.
            ws2 = WebSocket(base_url)
            ws2.send_json({"type": "state"})
            self.assertEqual(ws2.recv_json()["data"]["step_count"], 0)
            ws2.close()
        finally:
            p.stop_container()
            p.stop_container()  # idempotent
            p.close()
        # The URL stops working with the environment.
        self.assertNotEqual(get(f"{base_url}/health")[0], 200)

    def test_from_docker_image_sequence_and_env_vars(self) -> None:
        # EnvClient.from_docker_image: start_container(image, **kwargs), wait_for_ready(base_url),
        # connect; close() calls stop_container().
        p = self.P()
        base_url = p.start_container(ECHO, port=8123, env_vars={"ECHO_FLAG": "on"})
        try:
            p.wait_for_ready(base_url, timeout_s=30.0)
            ws = WebSocket(base_url)
            ws.send_json({"type": "reset", "data": {}})
            self.assertEqual(ws.recv_json()["type"], "observation")
            ws.close()
            with self.assertRaisesRegex(RuntimeError, "stop_container"):
                p.start_container(ECHO)  # one provider, one environment
            env = client().env(p.environment)
            r = client().exec(env["id"], ["sh", "-c", "echo $ECHO_FLAG; id -u"])
            self.assertEqual(r.stdout.decode().split(), ["on", "1000"])
        finally:
            p.close()

    def test_with_block_destroys_what_it_started(self) -> None:
        # OpenEnv's base class has no context-manager protocol: DenvProvider brings its own.
        from openenv.core.containers.runtime import ContainerProvider

        self.assertFalse(hasattr(ContainerProvider, "__enter__"))
        with self.P() as p:
            base_url = p.start_container(ECHO)  # the image, as OpenEnv passes it
            p.wait_for_ready(base_url)
            name = p.environment
            self.assertEqual(get(f"{base_url}/health"), (200, {"status": "healthy"}))
        self.assertIsNone(p.environment)
        self.assertNotIn(name, {e["name"] for e in client().envs()})

    def test_snapshot_and_fork_from_version(self) -> None:
        p = self.P(ECHO)
        base_url = p.start_container()
        try:
            env = client().env(p.environment)
            client().exec(env["id"], ["sh", "-c", "echo kept > /work/state"], user="root")
            version = p.snapshot()
            q = self.P(f"version:{version}")
            url2 = q.start_container()
            try:
                q.wait_for_ready(url2)
                self.assertNotEqual(url2, base_url)
                self.assertEqual(get(f"{url2}/health"), (200, {"status": "healthy"}))
                r = client().exec(client().env(q.environment)["id"], ["cat", "/work/state"])
                self.assertEqual(r.stdout, b"kept\n")
            finally:
                q.stop_container()
        finally:
            p.stop_container()

    def test_no_source_and_failed_start_leave_nothing(self) -> None:
        with self.assertRaisesRegex(ValueError, "no source"):
            self.P().start_container()
        before = {e["name"] for e in client().envs()}
        p = self.P("127.0.0.1:5000/denv/does-not-exist:1")
        with self.assertRaisesRegex(RuntimeError, "could not start"):
            p.start_container()
        p.stop_container()  # nothing to stop: still fine
        after = {e["name"] for e in client().envs() if e["status"] not in ("destroyed",)}
        self.assertEqual(after - before, set(), "a failed start left an environment")

    def test_wait_for_ready_times_out(self) -> None:
        p = self.P(ECHO)
        with self.assertRaises(TimeoutError):
            p.wait_for_ready(f"{live()['server']}/v1/tunnels/dpu_not-a-real-token", timeout_s=1.0)

    def test_port_url_is_a_capability(self) -> None:
        server = live()["server"]
        self.assertEqual(get(f"{server}/v1/tunnels/dpu_wrong/health")[0], 404)
        with self.assertRaises(ConnectionError):
            WebSocket(f"{server}/v1/tunnels/dpu_wrong")


class OpenEnvWithoutFramework(unittest.TestCase):
    def test_missing_openenv_says_how_to_install(self) -> None:
        self.assertIn("pip install 'denv[openenv]'", import_without_frameworks("denv.openenv"))


if __name__ == "__main__":
    unittest.main()
