"""Harbor conformance: denv.harbor:DenvEnvironment driven through Harbor's trial lifecycle
(Harbor's trial lifecycle: construct with mounts and a network policy -> start ->
healthcheck -> agent setup as root -> oracle agent -> agent logs -> artifacts -> verifier (upload
tests, chmod as root, run, download, reward.json else reward.txt) -> stop), the per-service
operations of the compose contract (1.5), and the environment forms a task may use."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import textwrap
import tomllib
import unittest
from pathlib import Path

from live import EXAMPLES, OPSBOX, client, import_without_frameworks, live

REDIS = "127.0.0.1:5000/denv/redis:7-bookworm"

COMPOSE = textwrap.dedent(
    f"""\
    services:
      main:
        image: {OPSBOX}
        user: "1000:1000"
        working_dir: /home/ubuntu
        command: ["sleep", "infinity"]
        environment: {{ HOME: /home/ubuntu }}
        volumes: ["home:/home/ubuntu"]
        depends_on: [cache]
      cache:
        image: {REDIS}
        command: ["redis-server", "--save", ""]
        healthcheck: {{ test: ["CMD", "redis-cli", "ping"], interval: 1s, retries: 20 }}
    volumes: {{ home: {{}} }}
    """
)

SOLVE = "#!/bin/bash\nset -e\necho 42 > /home/ubuntu/answer.txt\necho solved\n"
TEST = textwrap.dedent(
    """\
    #!/bin/bash
    if [ "$(cat /home/ubuntu/answer.txt 2>/dev/null)" = 42 ]; then r=1; else r=0; fi
    echo "{\\"reward\\": $r}" > /logs/verifier/reward.json
    echo "graded: $r"
    """
)


def make_task(root: Path, *, compose: bool = True) -> Path:
    task = root / "hello-denv"
    (task / "environment").mkdir(parents=True)
    (task / "solution").mkdir()
    (task / "tests").mkdir()
    (task / "task.toml").write_text('schema_version = "1.3"\n[environment]\nnetwork_mode = "no-network"\n')
    (task / "instruction.md").write_text("Write 42 to ~/answer.txt\n")
    if compose:
        (task / "environment" / "docker-compose.yaml").write_text(COMPOSE)
    (task / "solution" / "solve.sh").write_text(SOLVE)
    (task / "tests" / "test.sh").write_text(TEST)
    (task / "tests" / "data").mkdir()
    (task / "tests" / "data" / "expected.txt").write_text("42\n")
    return task


MOUNTS = [
    {"source": "trial/verifier", "target": "/logs/verifier"},
    {"source": "trial/agent", "target": "/logs/agent"},
    {"source": "trial/artifacts", "target": "/logs/artifacts"},
]


def construct(  # noqa: ANN201
    task: Path,
    trial_dir: Path,
    *,
    image: str | None = None,
    mode: str = "no-network",
    task_env: dict[str, str] | None = None,
    workdir: str | None = None,
    **kw,  # noqa: ANN003
):
    from denv.harbor import DenvEnvironment
    from harbor.models.task.config import EnvironmentConfig, NetworkMode, NetworkPolicy
    from harbor.models.trial.paths import TrialPaths

    cfg = EnvironmentConfig(
        docker_image=image, network_mode=NetworkMode(mode), env=task_env or {}, workdir=workdir
    )
    return DenvEnvironment(
        environment_dir=task / "environment",
        environment_name="hello-denv",
        session_id=f"hello-denv__{os.urandom(3).hex()}",
        trial_paths=TrialPaths(trial_dir),
        task_env_config=cfg,
        mounts=MOUNTS,
        network_policy=NetworkPolicy(network_mode=NetworkMode(mode)),
        persistent_env={"TRIAL_FLAG": "on"},
        **kw,
    )


async def run_trial(env, task: Path, trial_dir: Path) -> dict:  # noqa: ANN001
    """Harbor's single-step trial, in its order, with the oracle agent."""
    await asyncio.wait_for(env.start(force_build=False), timeout=600)
    try:
        r = await env.exec("true")  # healthcheck
        assert r.return_code == 0, r
        with env.with_default_user("root"):  # agent setup runs as root
            r = await env.exec("mkdir -p /opt/agent && id -u")
            assert r.stdout.strip() == "0", r
        await env.upload_dir(task / "solution", "/solution")
        r = await env.exec(
            "bash /solution/solve.sh > /logs/agent/oracle.txt 2>&1",
            env={"DEBIAN_FRONTEND": "noninteractive"},
        )
        assert r.return_code == 0, r
        await env.download_dir("/logs/agent", trial_dir / "agent")
        await env.exec("echo evidence > /logs/artifacts/notes.txt")
        if await env.is_dir("/logs/artifacts", user="root"):
            await env.download_dir("/logs/artifacts", trial_dir / "artifacts")
        await env.upload_dir(task / "tests", "/tests")
        r = await env.exec("chmod +x /tests/test.sh", user="root")
        assert r.return_code == 0, r
        await env.exec("(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1")
        await env.download_dir("/logs/verifier", trial_dir / "verifier")
        rj, rt = trial_dir / "verifier" / "reward.json", trial_dir / "verifier" / "reward.txt"
        return json.loads(rj.read_text()) if rj.exists() else {"reward": float(rt.read_text())}
    finally:
        await asyncio.shield(env.stop(delete=True))


class HarborTrial(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        live()
        cls.tmp = Path(tempfile.mkdtemp(prefix="denv-harbor-"))
        cls.task = make_task(cls.tmp)

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_type_capabilities_and_selection(self) -> None:
        from denv.harbor import DenvEnvironment

        self.assertEqual(DenvEnvironment.type(), "denv")
        env = construct(self.task, self.tmp / "t0")
        caps = env.capabilities
        self.assertTrue(caps.disable_internet and caps.docker_compose)
        self.assertFalse(caps.mounted or caps.gpus or caps.network_allowlist or caps.dynamic_network_policy)
        # An allowlist is not offered, so Harbor's own validation refuses the task before start.
        with self.assertRaises(ValueError):
            construct(self.task, self.tmp / "t0", mode="allowlist")

    def test_preflight_checks_the_server_and_key(self) -> None:
        from denv.harbor import DenvEnvironment

        DenvEnvironment.preflight()  # the live server and its key: passes
        saved = os.environ["DENV_API_KEY"]
        os.environ["DENV_API_KEY"] = "dk_wrong"
        try:
            with self.assertRaises(SystemExit) as cm:
                DenvEnvironment.preflight()
            self.assertIn("API key is not valid", str(cm.exception))
        finally:
            os.environ["DENV_API_KEY"] = saved

    def test_trial_lifecycle_compose_task_with_oracle(self) -> None:
        trial = self.tmp / "trial-oracle"
        env = construct(self.task, trial)
        rewards = asyncio.run(run_trial(env, self.task, trial))
        self.assertEqual(rewards, {"reward": 1})
        self.assertEqual((trial / "agent" / "oracle.txt").read_text(), "solved\n")
        self.assertEqual((trial / "artifacts" / "notes.txt").read_text(), "evidence\n")
        self.assertEqual((trial / "verifier" / "test-stdout.txt").read_text(), "graded: 1\n")
        # stop(delete=True) removed the environment.
        with self.assertRaises(Exception):
            client().env(env._core.session_id)  # never named after the session verbatim
        names = [e["name"] for e in client().envs()]
        self.assertFalse(any(n.startswith("h-hello-denv") for n in names), names)

    def test_trial_without_the_agent_scores_zero(self) -> None:
        trial = self.tmp / "trial-noop"
        env = construct(self.task, trial)

        async def trial_without_agent() -> dict:
            await env.start(force_build=False)
            try:
                await env.upload_dir(self.task / "tests", "/tests")
                await env.exec("chmod +x /tests/test.sh", user="root")
                await env.exec("(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1")
                await env.download_dir("/logs/verifier", trial / "verifier")
                return json.loads((trial / "verifier" / "reward.json").read_text())
            finally:
                await env.stop(delete=True)

        self.assertEqual(asyncio.run(trial_without_agent()), {"reward": 0})

    def test_exec_semantics(self) -> None:
        env = construct(self.task, self.tmp / "t-exec")

        async def go() -> None:
            await env.start(force_build=False)
            try:
                r = await env.exec("echo out; echo err >&2; exit 3")
                self.assertEqual((r.stdout, r.stderr, r.return_code), ("out\n", "err\n", 3))  # no raise
                self.assertEqual((await env.exec("echo $TRIAL_FLAG-$X", env={"X": "y"})).stdout, "on-y\n")
                self.assertEqual((await env.exec("pwd", cwd="/tmp")).stdout, "/tmp\n")
                self.assertEqual((await env.exec("id -u")).stdout, "1000\n")  # the service's user
                self.assertEqual((await env.exec("id -u", user=0)).stdout, "0\n")  # int uid
                self.assertEqual((await env.exec("whoami", user="root")).stdout, "root\n")
                self.assertEqual((await env.exec("[[ 1 == 1 ]] && echo bash")).stdout, "bash\n")
                with self.assertRaisesRegex(RuntimeError, "timed out after 1 seconds"):
                    await env.exec("sleep 5", timeout_sec=1)
            finally:
                await env.stop(delete=True)

        asyncio.run(go())

    def test_files_and_links(self) -> None:
        env = construct(self.task, self.tmp / "t-files")
        src = self.tmp / "blob.bin"
        src.write_bytes(bytes(range(256)) * 4096)

        async def go() -> None:
            await env.start(force_build=False)
            try:
                await env.upload_file(src, "/tmp/deep/dir/blob.bin")
                out = self.tmp / "back" / "blob.bin"
                await env.download_file("/tmp/deep/dir/blob.bin", out)
                self.assertEqual(out.read_bytes(), src.read_bytes())
                # A link the agent planted must not be followed on the way out.
                await env.exec(
                    "mkdir -p /logs/agent/sub && echo ok > /logs/agent/sub/real.txt && "
                    "ln -s /etc/passwd /logs/agent/leak && ln -s ../../../../etc /logs/agent/up",
                    user="root",
                )
                dest = self.tmp / "dl"
                dest.mkdir()
                (dest / "sub").mkdir()
                (dest / "sub" / "real.txt").write_text("old")  # overwritten
                await env.download_dir("/logs/agent", dest)
                self.assertEqual((dest / "sub" / "real.txt").read_text(), "ok\n")
                self.assertFalse((dest / "leak").exists() or (dest / "leak").is_symlink())
                self.assertFalse((dest / "up").exists() or (dest / "up").is_symlink())
            finally:
                await env.stop(delete=True)

        asyncio.run(go())

    def test_per_service_operations(self) -> None:
        env = construct(self.task, self.tmp / "t-svc")

        async def go() -> None:
            await env.start(force_build=False)
            try:
                r = await env.service_exec("redis-cli ping", service="cache")
                self.assertEqual(r.stdout.strip(), "PONG")
                await env.service_exec("redis-cli set answer 42", service="cache")
                out = self.tmp / "svc" / "hostname"
                await env.service_download_file("/etc/hostname", out, service="cache")
                self.assertTrue(out.read_text().strip())
                await env.service_exec("mkdir -p /tmp/dump && redis-cli get answer > /tmp/dump/a", service="cache")
                await env.service_download_dir("/tmp/dump", self.tmp / "svc" / "dump", service="cache")
                self.assertEqual((self.tmp / "svc" / "dump" / "a").read_text(), "42\n")
                self.assertTrue(await env.service_is_dir("/tmp/dump", service="cache"))
                # main is the same as no service
                self.assertEqual((await env.service_exec("id -u", service="main")).stdout, "1000\n")
                with self.assertRaises(ValueError):
                    await env.service_exec("true", service="nope")
                await env.stop_service("cache")
                with self.assertRaises(Exception):
                    await env.service_exec("redis-cli ping", service="cache")
                self.assertEqual((await env.exec("echo still")).stdout, "still\n")  # main keeps running
            finally:
                await env.stop(delete=True)

        asyncio.run(go())

    def test_docker_image_task_and_fork_from(self) -> None:
        bare = make_task(self.tmp / "image-task", compose=False)
        (bare / "environment" / "seed.txt").write_text("seeded\n")
        trial = self.tmp / "trial-image"
        # The trial's persistent env (TRIAL_FLAG=on) wins over the task's; the task's own stays.
        env = construct(bare, trial, image=OPSBOX, task_env={"TRIAL_FLAG": "task", "TASK_ONLY": "t"}, workdir="/work")

        async def go() -> None:
            await env.start(force_build=False)
            try:
                self.assertEqual(env._core.env["services"], ["main"])
                self.assertEqual((await env.exec("echo $TRIAL_FLAG-$TASK_ONLY")).stdout, "on-t\n")
                # Harbor's _upload_environment_dir_after_start: environment/ lands in the workdir.
                self.assertEqual((await env.exec("cat /work/seed.txt")).stdout, "seeded\n")
                self.assertTrue(await env.is_file("/work/seed.txt"))
                self.assertFalse(await env.is_dir("/work/seed.txt"))
                self.assertFalse(await env.is_file("/work/none"))
                await env.exec("echo state > /work/mark", user="root")
                version = await env.snapshot()
                self.assertTrue(version.startswith("ver_"))
                # A second trial forks that exact state.
                forked = construct(bare, self.tmp / "trial-fork", fork_from=version)
                await forked.start(force_build=False)
                try:
                    self.assertEqual((await forked.exec("cat /work/mark")).stdout, "state\n")
                finally:
                    await forked.stop(delete=True)
            finally:
                await env.stop(delete=True)

        asyncio.run(go())

    def test_dockerfile_only_task_is_built_on_the_host(self) -> None:
        """A task with only environment/Dockerfile: the adapter deploys it through the CLI's reading
        (denv builds the image on its host), once; the oracle scores 1 and a trial without it 0. A
        separate verifier's tests/ (a Dockerfile that bakes test.sh in) starts the same way."""
        task = self.tmp / "df" / "hello-df"
        (task / "environment").mkdir(parents=True)
        (task / "environment" / "Dockerfile").write_text(
            f"FROM {OPSBOX}\nRUN echo built > /etc/denv-built\nWORKDIR /home/ubuntu\n"
        )
        (task / "solution").mkdir()
        (task / "solution" / "solve.sh").write_text(SOLVE)
        (task / "tests").mkdir()
        (task / "tests" / "test.sh").write_text(TEST)
        trial = self.tmp / "t-df"
        before = {p["name"] for p in client().projects()}
        env = construct(task, trial)
        self.assertEqual(asyncio.run(run_trial(env, task, trial)), {"reward": 1})

        async def unsolved() -> tuple[dict, str, str]:
            env2 = construct(task, self.tmp / "t-df2")
            await env2.start(force_build=False)
            try:
                built = (await env2.exec("cat /etc/denv-built")).stdout
                pwd = (await env2.exec("pwd")).stdout
                await env2.upload_dir(task / "tests", "/tests")
                await env2.exec("chmod +x /tests/test.sh", user="root")
                await env2.exec("(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1")
                await env2.download_dir("/logs/verifier", self.tmp / "t-df2" / "verifier")
                return json.loads((self.tmp / "t-df2" / "verifier" / "reward.json").read_text()), built, pwd
            finally:
                await env2.stop(delete=True)

        reward, built, pwd = asyncio.run(unsolved())
        self.assertEqual((reward, built, pwd), ({"reward": 0}, "built\n", "/home/ubuntu\n"))
        # Deployed once: both trials forked the same base of one new project.
        made = {p["name"] for p in client().projects()} - before
        self.assertEqual(len(made), 1, made)
        self.assertRegex(made.pop(), r"^harbor-[0-9a-f]{16}$")

        verifier_dir = self.tmp / "df-verifier"
        verifier_dir.mkdir()
        (verifier_dir / "test.sh").write_text(TEST)
        (verifier_dir / "Dockerfile").write_text(f"FROM {OPSBOX}\nCOPY test.sh /tests/test.sh\n")

        async def separate_verifier() -> str:
            from denv.harbor import DenvEnvironment
            from harbor.models.task.config import EnvironmentConfig
            from harbor.models.trial.paths import TrialPaths

            v = DenvEnvironment(verifier_dir, "hello-df", "hello-df__verifier", TrialPaths(self.tmp / "t-v"),
                                EnvironmentConfig())
            await v.start(force_build=False)
            try:
                return (await v.exec("mkdir -p /logs/verifier; bash /tests/test.sh; cat /logs/verifier/reward.json",
                                      user="root")).stdout
            finally:
                await v.stop(delete=True)

        self.assertIn('{"reward": 0}', asyncio.run(separate_verifier()))

    def test_a_directory_with_nothing_to_run_is_refused_clearly(self) -> None:
        t = self.tmp / "empty-task" / "environment"
        t.mkdir(parents=True)
        (t / "notes.txt").write_text("no Dockerfile here\n")
        with self.assertRaisesRegex(FileNotFoundError, "nothing to run"):
            construct(t.parent, self.tmp / "t-empty")

    def test_a_compose_file_with_no_image_for_main_is_refused_as_the_importer_refuses_it(self) -> None:
        task = self.tmp / "noimg" / "t"
        (task / "environment").mkdir(parents=True)
        (task / "environment" / "docker-compose.yaml").write_text("services:\n  main:\n    environment: {A: b}\n")
        env = construct(task, self.tmp / "t-noimg")
        with self.assertRaisesRegex(RuntimeError, "services.main has no image"):
            asyncio.run(env.start(force_build=False))


class ExportedTaskOnTheAdapter(unittest.TestCase):
    """`denv export --harbor` of an ops-world version, run by Harbor's trial order on denv's own
    Harbor environment: the agent environment from environment/ (main by its pinned image, the
    sidecars, the warm jobs), the oracle as the agent's user, the artifact carried out, then the
    separate verifier environment built from tests/Dockerfile: 1 with the oracle, 0 without."""

    @classmethod
    def setUpClass(cls) -> None:
        live()
        cls.tmp = Path(tempfile.mkdtemp(prefix="denv-harbor-export-"))
        name = f"hx-ops-{os.urandom(3).hex()}"
        cli = shlex.split(os.environ["DENV_CLI"])
        run = lambda *a: subprocess.run([*cli, *a], capture_output=True, text=True, check=False)  # noqa: E731
        r = run("project", "create", "--kind", "rl-environment", "--source", str(EXAMPLES / "ops-world"), name)
        assert r.returncode == 0, r.stderr
        d = json.loads(run("deploy", "--project", name, "--wait", "--json").stdout)
        assert d["status"] == "succeeded", d
        r = run("export", "--harbor", f"{name}@{d['version_id']}", str(cls.tmp), "--json")
        assert r.returncode == 0, r.stderr
        cls.task = Path(json.loads(r.stdout)["dir"])
        cls.toml = tomllib.loads((cls.task / "task.toml").read_text())

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def trial(self, oracle: bool) -> str:
        from denv.harbor import DenvEnvironment
        from harbor.models.task.config import EnvironmentConfig, NetworkMode

        def config(section: dict) -> EnvironmentConfig:
            keep = {k: section[k] for k in ("docker_image", "cpus", "memory_mb", "workdir") if k in section}
            return EnvironmentConfig(network_mode=NetworkMode(section.get("network_mode", "public")), **keep)

        from harbor.models.trial.paths import TrialPaths

        agent_user = self.toml["agent"]["user"]
        artifact = self.toml["artifacts"][0]
        trial = self.tmp / f"trial-{os.urandom(3).hex()}"
        agent = DenvEnvironment(self.task / "environment", "ops-world", f"ops__{trial.name}", TrialPaths(trial),
                                config(self.toml["environment"]))
        verifier = DenvEnvironment(self.task / "tests", "ops-world", f"ops__{trial.name}__verifier",
                                   TrialPaths(trial), config(self.toml["verifier"]["environment"]))

        async def go() -> str:
            await agent.start(force_build=False)
            try:
                if oracle:
                    await agent.upload_dir(self.task / "solution", "/solution")
                    r = await agent.exec("bash /solution/solve.sh", user=agent_user)
                    self.assertEqual(r.return_code, 0, r.stderr)
                if await agent.is_file(artifact, user="root"):
                    await agent.download_file(artifact, trial / "artifacts" / "answer.txt")
            finally:
                await agent.stop(delete=True)
            await verifier.start(force_build=False)
            try:
                await verifier.exec("rm -rf /logs/verifier && mkdir -p /logs/verifier", user="root")
                if (trial / "artifacts" / "answer.txt").exists():
                    await verifier.upload_file(trial / "artifacts" / "answer.txt", artifact)
                await verifier.exec("chmod +x /tests/test.sh", user="root")
                await verifier.exec("(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1", user="root")
                return (await verifier.exec("cat /logs/verifier/reward.txt", user="root")).stdout.strip()
            finally:
                await verifier.stop(delete=True)

        return asyncio.run(go())

    def test_oracle_scores_one_and_no_agent_zero(self) -> None:
        self.assertEqual(self.trial(oracle=True), "1")
        self.assertEqual(self.trial(oracle=False), "0")


class HarborWithoutFramework(unittest.TestCase):
    def test_missing_harbor_says_how_to_install(self) -> None:
        self.assertIn("pip install 'denv[harbor]'", import_without_frameworks("denv.harbor"))


if __name__ == "__main__":
    unittest.main()
