"""The verify attack cases through each adapter: an agent acting through Inspect's, Harbor's or
OpenEnv's interface cannot earn a reward it did not earn. Each adapter runs the same table on the
ops-world task (answer 9993) and grades with denv verify (stop -> collect root-side -> snapshot ->
clone -> grade on the fork), reached through the adapter's own verify()."""

from __future__ import annotations

import asyncio
import os
import tempfile
import textwrap
import unittest
from pathlib import Path

from live import OPSBOX, client, live


def compose(service: str) -> str:
    return textwrap.dedent(
        f"""\
        x-denv:
          kind: rl-environment
          agent: {{ service: {service} }}
          verifier:
            image: 127.0.0.1:5000/denv/ops-verifier:1.2
            command: ["/verify.sh"]
            collect: ["/home/ubuntu/answer.txt"]
            timeout: 30s
        services:
          {service}:
            image: {OPSBOX}
            user: "1000:1000"
            working_dir: /home/ubuntu
            command: ["sleep", "infinity"]
            volumes: ["home:/home/ubuntu"]
        volumes: {{ home: {{}} }}
        """
    )


# (name, what the agent does as user 1000, expected reward, text the refusal must carry)
CASES = [
    ("right answer", "echo 9993 > /home/ubuntu/answer.txt", 1, None),
    ("wrong answer", "echo 42 > /home/ubuntu/answer.txt", 0, None),
    ("symlink to a root-only file", "ln -s /etc/shadow /home/ubuntu/answer.txt", 0, "symbolic link"),
    ("hard link", "echo 9993 > /home/ubuntu/real && ln /home/ubuntu/real /home/ubuntu/answer.txt", 0, "hard link"),
    ("FIFO", "mkfifo /home/ubuntu/answer.txt", 0, "FIFO"),
    (
        "background rewriter after the agent is done",
        "echo 9993 > /home/ubuntu/answer.txt; (sleep 1; echo 0 > /home/ubuntu/answer.txt) >/dev/null 2>&1 &",
        1,
        None,
    ),
]


class AttackTable:
    """Mixed into one TestCase per adapter: `episode(agent_script)` returns the verdict."""

    def check_case(self, name: str, script: str, reward: int, refusal: str | None) -> None:
        v = self.episode(script)  # type: ignore[attr-defined]
        self.assertEqual(v["reward"], reward, f"{name}: {v}")  # type: ignore[attr-defined]
        if refusal:
            self.assertIn(refusal, v["reason"] or "", f"{name}: {v}")  # type: ignore[attr-defined]
        self.assertEqual(v["agent"], "frozen for inspection")  # type: ignore[attr-defined]


def _table(cls: type) -> type:
    for i, (name, script, reward, refusal) in enumerate(CASES):

        def test(self, name=name, script=script, reward=reward, refusal=refusal) -> None:  # noqa: ANN001
            self.check_case(name, script, reward, refusal)

        setattr(cls, f"test_{i}_{name.replace(' ', '_').replace('-', '_')}", test)
    return cls


@_table
class ThroughInspect(AttackTable, unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        live()
        from denv.inspect import DenvSandboxEnvironment

        cls.S = DenvSandboxEnvironment
        cls.dir = tempfile.mkdtemp(prefix="denv-attacks-inspect-")
        cls.config = os.path.join(cls.dir, "compose.yaml")
        Path(cls.config).write_text(compose("box"))
        asyncio.run(cls.S.task_init("startup", cls.config))

    @classmethod
    def tearDownClass(cls) -> None:
        asyncio.run(cls.S.task_cleanup("shutdown", cls.config, True))

    def episode(self, script: str) -> dict:
        async def go() -> dict:
            envs = await self.S.sample_init("attacks", self.config, {})
            try:
                env = envs["box"]
                r = await env.exec(["sh", "-c", script])
                self.assertTrue(r.success, r.stderr)
                return await env.verify()
            finally:
                await self.S.sample_cleanup("attacks", self.config, envs, False)

        return asyncio.run(go())


@_table
class ThroughHarbor(AttackTable, unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        live()
        cls.dir = Path(tempfile.mkdtemp(prefix="denv-attacks-harbor-"))
        (cls.dir / "task" / "environment").mkdir(parents=True)
        (cls.dir / "task" / "environment" / "docker-compose.yaml").write_text(compose("main"))

    def episode(self, script: str) -> dict:
        from denv.harbor import DenvEnvironment
        from harbor.models.task.config import EnvironmentConfig
        from harbor.models.trial.paths import TrialPaths

        env = DenvEnvironment(
            environment_dir=self.dir / "task" / "environment",
            environment_name="ops-world",
            session_id=f"ops-world__{os.urandom(3).hex()}",
            trial_paths=TrialPaths(self.dir / "trial"),
            task_env_config=EnvironmentConfig(),
        )

        async def go() -> dict:
            await env.start(force_build=False)
            try:
                r = await env.exec(script)
                self.assertEqual(r.return_code, 0, r.stderr)
                return await env.verify()
            finally:
                await env.stop(delete=True)

        return asyncio.run(go())


@_table
class ThroughOpenEnv(AttackTable, unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        live()
        from denv._bases import ensure_base

        _project, cls.base = ensure_base(client(), "openenv-attacks", compose("box"))

    @classmethod
    def tearDownClass(cls) -> None:
        client().destroy(cls.base["id"])

    def episode(self, script: str) -> dict:
        from denv.openenv import DenvProvider

        p = DenvProvider(f"version:{self.base['current_version_id']}")
        try:
            p.start_container()
            env = client().env(p.environment)
            r = client().exec(env["id"], ["sh", "-c", script])
            self.assertEqual(r.exit_code, 0, r.stderr)
            return p.verify()
        finally:
            p.stop_container()


if __name__ == "__main__":
    unittest.main()
