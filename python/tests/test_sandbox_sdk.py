"""denv.Sandbox and denv.AsyncSandbox against a live denv: create, commands, files, errors as
classes, snapshot and fork, and ``with`` / ``async with`` destroying what they made."""

from __future__ import annotations

import asyncio
import time
import unittest
from collections.abc import Iterator

from live import OPSBOX, client, live


class SandboxSdk(unittest.TestCase):
    def setUp(self) -> None:
        live()

    def test_sync_surface(self) -> None:
        import denv

        made = ""
        with denv.Sandbox.create(image=OPSBOX, cmd=["sleep", "infinity"], user="1000:1000", volumes=["/home/ubuntu"]) as sb:
            made = sb.id
            r = sb.commands.run(["sh", "-c", 'echo "$USER $HOME"; echo e >&2; exit 4'])
            self.assertEqual((r.exit_code, r.stdout, r.stderr), (4, "ubuntu /home/ubuntu\n", "e\n"))
            chunks: list[bytes] = []
            s = sb.commands.run("for i in 1 2; do echo $i; done", on_stdout=chunks.append)
            self.assertEqual(b"".join(chunks), b"1\n2\n")
            self.assertEqual(s.stdout, "1\n2\n")
            self.assertEqual(sb.commands.run("cat", stdin=b"\x00z").stdout_bytes, b"\x00z")
            t = sb.commands.run("sleep 30", timeout_ms=500)
            self.assertTrue(t.timed_out)
            sb.files.write("/home/ubuntu/sdk/a.txt", "alpha\n")
            self.assertEqual(sb.files.read_text("/home/ubuntu/sdk/a.txt"), "alpha\n")
            self.assertEqual(sb.files.stat("/home/ubuntu/sdk/a.txt")["owner"], "ubuntu")
            self.assertEqual([e["name"] for e in sb.files.list("/home/ubuntu/sdk")], ["a.txt"])
            with self.assertRaises(denv.ConflictError) as e:
                sb.files.write("/home/ubuntu/sdk", "x")
            self.assertEqual(e.exception.code, "is_directory")
            with self.assertRaises(denv.PermissionDeniedError):
                sb.files.write("/etc/x.conf", "x")
            with self.assertRaises(denv.NotFoundError):
                sb.files.read("/home/ubuntu/none")
            self.assertTrue(sb.files.exists("/home/ubuntu/sdk"))
            sb.files.remove("/home/ubuntu/sdk", recursive=True)
            self.assertFalse(sb.files.exists("/home/ubuntu/sdk"))
            sb.files.write("/home/ubuntu/state", "v1")
            self.assertEqual(sb.snapshot()["status"], "succeeded")
            with sb.fork(name="py-fork") as f:
                self.assertEqual(f.files.read_text("/home/ubuntu/state"), "v1")
                fork_id = f.id
            with self.assertRaises(denv.NotFoundError):
                client().env(fork_id)
            self.assertIn("/v1/tunnels/", sb.port_url(8000))
        with self.assertRaises(denv.NotFoundError):
            client().env(made)

    def test_logs(self) -> None:
        import denv

        cmd = ["sh", "-c", "echo hello-py; echo warn-py >&2; while :; do date +tick-%s%N; sleep 0.2; done"]
        with denv.Sandbox.create(image=OPSBOX, cmd=cmd, user="1000:1000") as sb:
            c = client()
            first: list[dict[str, str]] = []
            deadline = time.monotonic() + 120
            while not any(x["line"].startswith("tick-") for x in first) and time.monotonic() < deadline:
                first = list(c.logs(sb.id, tail=1000))
            lines = {(x["service"], x["stream"], x["line"]) for x in first}
            self.assertIn(("main", "stdout", "hello-py"), lines)
            self.assertIn(("main", "stderr", "warn-py"), lines)
            self.assertTrue(all(x["time"] for x in first))
            # Followed: lines written after the call, until the iteration stops.
            followed = c.logs(sb.id, tail=0, follow=True)
            ticks = [next(followed)["line"], next(followed)["line"]]
            followed.close()
            self.assertTrue(all(t.startswith("tick-") for t in ticks), ticks)
            with self.assertRaises(denv.NotFoundError):
                list(c.logs(sb.id, service="nope"))
            with self.assertRaises(denv.InvalidArgumentError):
                list(c.logs(sb.id, since="yesterday"))

    def test_streams(self) -> None:
        import hashlib

        import denv

        size = 40 * 1024 * 1024 + 17

        def pattern() -> Iterator[bytes]:
            block = bytearray(1 << 20)
            for off in range(0, size, len(block)):
                block[0:8] = off.to_bytes(8, "little")
                yield bytes(block[: min(len(block), size - off)])

        want = hashlib.sha256(b"".join(pattern())).hexdigest()
        with denv.Sandbox.create(image=OPSBOX, cmd=["sleep", "infinity"], user="1000:1000", volumes=["/home/ubuntu"]) as sb:
            sb.files.write("/home/ubuntu/big/f.bin", pattern(), size=size)
            self.assertEqual(sb.files.stat("/home/ubuntu/big/f.bin")["size"], size)
            h = hashlib.sha256()
            for chunk in sb.files.read_stream("/home/ubuntu/big/f.bin"):
                h.update(chunk)
            self.assertEqual(h.hexdigest(), want)
            with self.assertRaises(ValueError):
                sb.files.write("/home/ubuntu/big/g.bin", pattern())
            with self.assertRaises(ValueError):
                sb.files.write("/home/ubuntu/big/short.bin", iter([b"abc"]), size=10)
            self.assertFalse(sb.files.exists("/home/ubuntu/big/short.bin"))
            with self.assertRaises(denv.NotFoundError):
                sb.files.read_stream("/home/ubuntu/none")
            r = sb.commands.run(["sh", "-c", "sha256sum | cut -c1-64"], stdin=pattern())
            self.assertEqual((r.exit_code, r.stdout.strip()), (0, want))
            with open(__file__, "rb") as f:
                mine = f.read()
                f.seek(0)
                self.assertEqual(sb.commands.run(["wc", "-c"], stdin=f).stdout.strip(), str(len(mine)))

    def test_fan_out(self) -> None:
        import secrets

        import denv

        prefix = f"fan-{secrets.token_hex(3)}"
        with denv.Sandbox.create(image=OPSBOX, cmd=["sleep", "infinity"]) as sb:
            sb.files.write("/work/mark", "v1")
            version = sb.snapshot()["version_id"]
            r = client().fan_out(version, 3, name_prefix=prefix)
            try:
                self.assertEqual((r["requested"], r["created"], r["failed"]), (3, 3, 0))
                self.assertEqual([f["name"] for f in r["forks"]], [f"{prefix}-1", f"{prefix}-2", f"{prefix}-3"])
                first = r["forks"][0]["environment"]["id"]
                self.assertEqual(client().exec(first, ["cat", "/work/mark"]).stdout, b"v1")
                again = client().fan_out(version, 1, name_prefix=prefix)
                self.assertEqual((again["created"], again["forks"][0]["error"]["code"]), (0, "conflict"))
            finally:
                for f in r["forks"]:
                    if f["ok"]:
                        client().destroy(f["environment"]["id"])

    def test_replay_and_datasheet(self) -> None:
        import denv

        with denv.Sandbox.create(image=OPSBOX, cmd=["sleep", "infinity"]) as sb:
            sb.files.write("/work/mark", "replayed")
            version = sb.snapshot()["version_id"]
            same = client().replay(version, [{"command": "cat /work/mark"}], forks=2)
            self.assertEqual(same["status"], "identical", same["report"].get("first_divergence"))
            self.assertEqual(same["report"]["reference"]["steps"][0]["stdout"], "replayed")
            # An image sandbox runs on the real clock: nanoseconds differ in every fork.
            differ = client().replay(version, [{"command": "date +%s%N"}], forks=2)
            self.assertEqual(differ["status"], "diverged")
            self.assertIn("clock", differ["report"]["first_divergence"]["sources"])
            sheet = client().datasheet(version)
            self.assertEqual(sheet["version"]["id"], version)
            self.assertEqual(sorted(r["status"] for r in sheet["replays"]), ["diverged", "identical"])
            self.assertIn(f"@{version}", client().datasheet(version, markdown=True).splitlines()[0])
            listed = [v for v in client().versions() if v["id"] == version]
            self.assertEqual(len(listed), 1)
            with self.assertRaises(denv.ConflictError) as e:
                client().delete_version(version)
            self.assertIn("runs it", str(e.exception))
            # What changed since the snapshot: the file written after it, and nothing else.
            sb.files.write("/work/after", "new")
            d = sb.diff()
            self.assertEqual(d["against"], version)
            self.assertEqual([(e["change"], e["path"]) for e in d["entries"]], [("created", "after")])
            self.assertEqual(d["entries"][0]["diff"], "--- /dev/null\n+++ b/after\n@@ -0,0 +1,1 @@\n+new\n\\ No newline at end of file\n")
            with self.assertRaises(denv.InvalidArgumentError):
                client().replay(version, [{"command": "true", "verifier": True}], forks=1)

    def test_warm_pool(self) -> None:
        import time

        import denv

        with denv.Sandbox.create(image=OPSBOX, cmd=["sleep", "infinity"]) as sb:
            sb.files.write("/work/mark", "pooled")
            version = sb.snapshot()["version_id"]
            pool = client().set_pool(version, 1)
            self.assertEqual((pool["size"], pool["hits"], pool["misses"]), (1, 0, 0))
            try:
                deadline = time.monotonic() + 120
                while client().pool(version)["ready"] < 1:
                    self.assertLess(time.monotonic(), deadline, "the pool never filled")
                    time.sleep(0.2)
                with denv.Sandbox.create(from_version=version) as taken:
                    self.assertEqual(taken.files.read("/work/mark"), b"pooled")
                    self.assertEqual(client().pool(version)["hits"], 1)
                    self.assertIn(version, [p["version_id"] for p in client().pools()])
                with self.assertRaises(denv.InvalidArgumentError):
                    client().set_pool(version, 100000)
            finally:
                self.assertGreaterEqual(client().drain_pool(version), 0)
            with self.assertRaises(denv.NotFoundError):
                client().pool(version)
        # A pool of sandboxes from an image: Sandbox.create with the same settings takes one.
        settings = {"cmd": ["sleep", "infinity"], "env": {"POOLED": "yes"}}
        image_pool = client().set_image_pool(1, image=OPSBOX, **settings)
        try:
            deadline = time.monotonic() + 120
            while client().pool(image_pool["version_id"])["ready"] < 1:
                self.assertLess(time.monotonic(), deadline, "the image pool never filled")
                time.sleep(0.2)
            with denv.Sandbox.create(image=OPSBOX, **settings) as taken:
                self.assertEqual(taken.commands.run("printenv POOLED").stdout, "yes\n")
                self.assertEqual(client().pool(image_pool["version_id"])["hits"], 1)
        finally:
            client().set_image_pool(0, image=OPSBOX, **settings)

    def test_fleet_calls(self) -> None:
        import denv

        host = client().hosts()[0]
        with denv.Sandbox.create(image=OPSBOX, cmd=["sleep", "infinity"]) as sb:
            version = sb.snapshot()["version_id"]
            same = client().replicate_version(version, host["name"])
            self.assertTrue(same["already"], "the host that took the version holds it")
            self.assertEqual(same["bytes"], 0)
            kept = client().keep_copies(version, 1)
            self.assertEqual((kept["copies"], kept["holders"], kept["made"]), (1, [host["id"]], []))
            with self.assertRaises(denv.NotFoundError):
                client().replicate_version(version, "no-such-host")
            with self.assertRaises(denv.InvalidArgumentError):
                client().keep_copies(version, 17)
        drained = client().drain_host(host["id"])
        try:
            self.assertTrue(drained["draining"])
            self.assertTrue(next(h for h in client().hosts() if h["id"] == host["id"])["draining"])
        finally:
            self.assertFalse(client().undrain_host(host["id"])["draining"])
        self.assertFalse(next(h for h in client().hosts() if h["id"] == host["id"])["draining"])

    def test_async_surface(self) -> None:
        import denv

        async def main() -> str:
            async with await denv.AsyncSandbox.create(image=OPSBOX, cmd=["sleep", "infinity"]) as sb:
                r = await sb.commands.run("id -u")
                self.assertEqual(r.stdout, "0\n")
                await sb.files.write("/work/x", b"bytes")
                self.assertEqual(await sb.files.read("/work/x"), b"bytes")
                return sb.id

        made = asyncio.run(main())
        with self.assertRaises(denv.NotFoundError):
            client().env(made)

    def test_error_families_cover_the_table(self) -> None:
        from denv.errors import ERROR_CODES, ERROR_FAMILIES, DenvError, error_for

        self.assertEqual(sorted(ERROR_FAMILIES), sorted(ERROR_CODES))
        e = error_for("not_a_directory", "x")
        self.assertIsInstance(e, DenvError)
        self.assertEqual(type(e).__name__, "ConflictError")
        self.assertEqual(type(error_for("brand_new", "?")).__name__, "InternalError")


if __name__ == "__main__":
    unittest.main()
