/**
 * A Harbor-format trial runner of our own, for tests: it runs a Harbor task directory the way
 * Harbor's docker environment does (as Harbor's source and documentation describe it), with no denv in the
 * path: compose files in Harbor's order (resources, prebuilt main with `sleep infinity`, the task's
 * own compose file, the /logs bind mounts, no-network), up; the agent's commands as [agent].user;
 * the verifier in shared mode (tests/ uploaded to /tests in main) or separate mode (the agent
 * environment stopped, a second environment built from tests/, the artifacts copied in at their
 * original paths); test.sh's output in /logs/verifier; reward.json read first, then reward.txt;
 * everything removed at the end. It drives Debian's docker-compose (v1) and the docker CLI.
 */
import { execFile } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { parse as parseToml } from "smol-toml";

const run = promisify(execFile);

interface TaskToml {
  artifacts?: (string | { source: string })[];
  agent?: { user?: string | number };
  verifier?: {
    user?: string | number;
    environment_mode?: string;
    env?: Record<string, string>;
    environment?: { network_mode?: string };
  };
  environment?: { docker_image?: string; cpus?: number; memory_mb?: number; network_mode?: string };
}

export interface TrialResult {
  rewards: Record<string, number>;
  testStdout: string;
  agentOutputs: string[];
}

async function sh(cmd: string, args: string[], opts: { cwd?: string; input?: string } = {}) {
  try {
    return await run(cmd, args, { cwd: opts.cwd, maxBuffer: 64 * 1024 * 1024, timeout: 15 * 60_000 });
  } catch (err) {
    const e = err as { stderr?: string; stdout?: string; message: string };
    throw new Error(`${cmd} ${args.join(" ")} failed: ${e.stderr || e.stdout || e.message}`);
  }
}

class ComposeEnv {
  readonly project: string;
  readonly dir: string;
  readonly files: string[];
  constructor(project: string, dir: string, files: string[]) {
    this.project = project;
    this.dir = dir;
    this.files = files;
  }
  private args(...rest: string[]) {
    return [
      "-p",
      this.project,
      "--project-directory",
      this.dir,
      ...this.files.flatMap((f) => ["-f", f]),
      ...rest,
    ];
  }
  up() {
    return sh("docker-compose", this.args("up", "-d", "--build"));
  }
  down() {
    return sh("docker-compose", this.args("down", "--volumes", "--remove-orphans", "--rmi", "local")).catch(
      () => {},
    );
  }
  async container(): Promise<string> {
    return (await sh("docker-compose", this.args("ps", "-q", "main"))).stdout.trim();
  }
  async exec(command: string, user: string | number | undefined, env: Record<string, string> = {}) {
    const flags = [
      "-T",
      ...(user !== undefined ? ["-u", String(user)] : []),
      ...Object.entries(env).flatMap(([k, v]) => ["-e", `${k}=${v}`]),
    ];
    try {
      const r = await run("docker-compose", this.args("exec", ...flags, "main", "bash", "-c", command), {
        maxBuffer: 64 * 1024 * 1024,
      });
      return { code: 0, out: r.stdout + r.stderr };
    } catch (err) {
      const e = err as { code?: number; stdout?: string; stderr?: string };
      return { code: e.code ?? 1, out: `${e.stdout ?? ""}${e.stderr ?? ""}` };
    }
  }
}

/**
 * Runs one trial of a task: `agent` is a list of shell commands, run in order as the agent's user,
 * or "oracle": Harbor's oracle agent (solution/ copied to /solution, `bash /solution/solve.sh` as
 * the agent's user).
 */
export async function runHarborTrial(taskDir: string, agent: string[] | "oracle"): Promise<TrialResult> {
  const task = parseToml(readFileSync(join(taskDir, "task.toml"), "utf8")) as TaskToml;
  const env = task.environment ?? {};
  const trialName = `trial${Math.random().toString(16).slice(2, 10)}`;
  const trial = mkdtempSync(join(tmpdir(), "harbor-trial-"));
  const logs = {
    verifier: join(trial, "verifier"),
    agent: join(trial, "agent"),
    artifacts: join(trial, "artifacts"),
  };
  for (const d of Object.values(logs)) {
    mkdirSync(d, { recursive: true });
    // Harbor makes the mounted trial directories writable by any user in the container.
    chmodSync(d, 0o777);
  }
  const override = (name: string, doc: unknown) => {
    const p = join(trial, name);
    writeFileSync(p, JSON.stringify(doc));
    return p;
  };
  const mounts = (only?: string[]) =>
    override(`mounts-${only ? "v" : "a"}.json`, {
      services: {
        main: {
          volumes: Object.entries(logs)
            .filter(([k]) => !only || only.includes(k))
            .map(([k, host]) => `${host}:/logs/${k}`),
        },
      },
    });
  const envDir = join(taskDir, "environment");
  const files = [
    override("resources.json", {
      services: {
        main: {
          ...(env.cpus ? { cpus: env.cpus } : {}),
          ...(env.memory_mb ? { mem_limit: `${env.memory_mb}m` } : {}),
        },
      },
    }),
    env.docker_image
      ? override("prebuilt.json", {
          services: { main: { image: env.docker_image, command: ["sh", "-c", "sleep infinity"] } },
        })
      : override("build.json", {
          services: { main: { build: { context: envDir }, command: ["sh", "-c", "sleep infinity"] } },
        }),
    ...(existsSync(join(envDir, "docker-compose.yaml")) ? [join(envDir, "docker-compose.yaml")] : []),
    mounts(),
    ...(env.network_mode === "no-network"
      ? [override("no-network.json", { services: { main: { network_mode: "none" } } })]
      : []),
  ];
  const agentEnv = new ComposeEnv(`${trialName}`, existsSync(envDir) ? envDir : trial, files);
  let verifierEnv: ComposeEnv | null = null;
  const agentOutputs: string[] = [];
  try {
    await agentEnv.up();
    if (agent === "oracle") {
      if (!existsSync(join(taskDir, "solution", "solve.sh")))
        throw new Error(`${taskDir} has no solution/solve.sh`);
      await agentEnv.exec("rm -rf /solution && mkdir -p /solution", "root");
      await sh("docker", ["cp", `${join(taskDir, "solution")}/.`, `${await agentEnv.container()}:/solution`]);
      await agentEnv.exec("chmod -R a+rX /solution", "root");
    }
    for (const command of agent === "oracle" ? ["bash /solution/solve.sh"] : agent) {
      const r = await agentEnv.exec(command, task.agent?.user);
      agentOutputs.push(r.out);
    }
    const verifier = task.verifier ?? {};
    const separate = verifier.environment_mode === "separate" || verifier.environment !== undefined;
    const paths = (task.artifacts ?? []).map((a) => (typeof a === "string" ? a : a.source));
    let main = agentEnv;
    if (separate) {
      // Artifacts leave the agent's environment, which is stopped before the verifier's starts.
      const from = await agentEnv.container();
      for (const p of paths) {
        const to = join(logs.artifacts, "paths", p);
        mkdirSync(dirname(to), { recursive: true });
        await sh("docker", ["cp", `${from}:${p}`, to]).catch(() => {});
      }
      await agentEnv.down();
      const testsDir = join(taskDir, "tests");
      verifierEnv = new ComposeEnv(`${trialName}v`, testsDir, [
        override("verifier-build.json", {
          services: { main: { build: { context: testsDir }, command: ["sh", "-c", "sleep infinity"] } },
        }),
        mounts(["verifier"]),
        ...(verifier.environment?.network_mode === "no-network"
          ? [override("verifier-no-network.json", { services: { main: { network_mode: "none" } } })]
          : []),
      ]);
      await verifierEnv.up();
      main = verifierEnv;
      await main.exec("rm -rf /logs/verifier/* && mkdir -p /logs/verifier", "root");
      const into = await main.container();
      for (const p of paths) {
        const at = join(logs.artifacts, "paths", p);
        if (!existsSync(at)) continue;
        await main.exec(`mkdir -p '${dirname(p)}'`, "root");
        await sh("docker", ["cp", at, `${into}:${p}`]);
      }
    } else {
      const into = await main.container();
      await main.exec("rm -rf /tests && mkdir -p /tests", "root");
      await sh("docker", ["cp", `${join(taskDir, "tests")}/.`, `${into}:/tests`]);
    }
    await main.exec("chmod +x /tests/test.sh", "root");
    await main.exec(
      "(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1",
      verifier.user,
      verifier.env ?? {},
    );
    const testStdout = existsSync(join(logs.verifier, "test-stdout.txt"))
      ? readFileSync(join(logs.verifier, "test-stdout.txt"), "utf8")
      : "";
    let rewards: Record<string, number>;
    if (existsSync(join(logs.verifier, "reward.json")))
      rewards = JSON.parse(readFileSync(join(logs.verifier, "reward.json"), "utf8")) as Record<
        string,
        number
      >;
    else if (existsSync(join(logs.verifier, "reward.txt")))
      rewards = { reward: Number.parseFloat(readFileSync(join(logs.verifier, "reward.txt"), "utf8")) };
    else throw new Error(`RewardFileNotFoundError: test.sh wrote no reward\n${testStdout}`);
    return { rewards, testStdout, agentOutputs };
  } finally {
    await agentEnv.down();
    await verifierEnv?.down();
    rmSync(trial, { recursive: true, force: true });
  }
}
