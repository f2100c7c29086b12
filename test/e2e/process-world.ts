/**
 * A server and a denvd as separate processes, as an operator runs them: the server on SQLite in a
 * data directory of its own, denvd joined to it through a token, ops-world uploaded. Either can be
 * SIGKILLed and started again on the same directories. Used by the restart and chaos tests and by
 * scripts/chaos.ts; everything it made is labelled with the run id and removed by `close`.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LABEL } from "@denv/denvd";
import { removeLabelled } from "../harness/engine.ts";
import { freePort } from "../harness/net.ts";
import { openTestHost, readHostState, repoRoot } from "../harness/test-host.ts";
import { waitFor } from "../harness/wait-for.ts";

export const denvBin = join(repoRoot, "packages/cli/bin/denv.js");
export const denvdBin = join(repoRoot, "packages/denvd/bin/denvd.js");
export const opsWorldCompose = readFileSync(join(repoRoot, "examples/ops-world/docker-compose.yaml"), "utf8");

/** Starts a process and resolves once it says it is up (the server listens, denvd connects). */
export function startProcess(
  bin: string,
  args: string[],
  env: Record<string, string> = {},
): Promise<ChildProcess> {
  const child = spawn(process.execPath, [bin, ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  return new Promise((resolve, reject) => {
    const onData = (c: Buffer) => {
      out += c.toString();
      // Kept short: a long-lived child's log is only needed to say why it did not start.
      if (out.length > 64 * 1024) out = out.slice(-32 * 1024);
      if (/listening on|Connected/.test(out)) resolve(child);
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    child.on("exit", (code) => reject(new Error(`${bin} exited (${code}): ${out}`)));
  });
}

/**
 * Kills a child and waits for it to be gone. One already gone resolves at once: a child killed by a
 * signal has a null exitCode (its signalCode says how it ended), and waiting for an 'exit' that has
 * already come would leave nothing for the event loop to do, so a test file would end there and
 * skip the rest of its cleanup (its stacks were left running).
 */
export function kill(child: ChildProcess | null): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((r) => {
    child.on("exit", () => r());
    child.kill("SIGKILL");
  });
}

export interface ApiAnswer {
  status: number;
  data: any;
  ms: number;
}

/** Polls fn until it returns something other than undefined (the harness's waitFor). */
export function until<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs?: number): Promise<T> {
  return waitFor(what, fn, { intervalMs: 100, ...(timeoutMs ? { timeoutMs } : {}) }) as Promise<T>;
}

export interface ProcessWorld {
  runId: string;
  url: string;
  stateDir: string;
  dataDir: string;
  server: ChildProcess;
  denvd: ChildProcess | null;
  /** The API as the admin key sees it; a request that cannot reach the server throws. */
  api: (method: string, path: string, body?: unknown, timeoutMs?: number) => Promise<ApiAnswer>;
  restartServer: () => Promise<void>;
  startDenvd: () => Promise<void>;
  /** denvd's state file as it is on disk now. */
  hostState: () => { ownerId: string; stacks: Record<string, any>; versions: Record<string, any> };
  /** What the engine holds with this host's owner label: containers (with their state), networks, volumes. */
  engine: () => {
    containers: { id: string; state: string; stack: string }[];
    networks: number;
    volumes: number;
  };
  close: () => Promise<void>;
}

/** A server process, a denvd process joined to it, and ops-world uploaded as a project. */
export async function processWorld(opts: { allowFetch?: string[] } = {}): Promise<ProcessWorld> {
  const runId = `rs-${randomBytes(4).toString("hex")}`;
  const dataDir = await mkdtemp(join(tmpdir(), "denv-server-"));
  const stateDir = join("/var/lib/denv-test", runId);
  const port = await freePort();
  const key = `dk_${runId}`;
  const url = `http://127.0.0.1:${port}`;
  const serverArgs = [
    "server",
    "--data-dir",
    dataDir,
    "--port",
    String(port),
    "--allow-fetch",
    ["127.0.0.1:5000", ...(opts.allowFetch ?? [])].join(","),
    // Port URLs on any free port (the default, the API's port + 1, may be taken here).
    "--ports-port",
    "0",
    // A denvd SIGKILLed mid-operation restarts in seconds, more on a machine this busy: calls
    // wait for it rather than failing after the default 10 s.
    "--host-wait-s",
    "90",
  ];
  const w: ProcessWorld = {
    runId,
    url,
    stateDir,
    dataDir,
    server: await startProcess(denvBin, serverArgs, { DENV_ADMIN_KEY: key }),
    denvd: null,
    api: async (method, path, body, timeoutMs = 10 * 60_000) => {
      const t = performance.now();
      const res = await fetch(`${url}${path}`, {
        method,
        headers: { authorization: `Bearer ${key}`, ...(body ? { "content-type": "application/json" } : {}) },
        body: body ? JSON.stringify(body) : undefined,
        signal: AbortSignal.timeout(timeoutMs),
      });
      const text = await res.text();
      let data: unknown = text;
      try {
        data = JSON.parse(text);
      } catch {}
      return { status: res.status, data, ms: performance.now() - t };
    },
    restartServer: async () => {
      w.server = await startProcess(denvBin, serverArgs, { DENV_ADMIN_KEY: key });
    },
    startDenvd: async () => {
      w.denvd = await startProcess(denvdBin, [
        "run",
        "--state-dir",
        stateDir,
        "--label",
        `dev.denv.test=${runId}`,
      ]);
    },
    hostState: () => readHostState(stateDir),
    engine: () => {
      const owner = `${LABEL.owner}=${w.hostState().ownerId}`;
      const run = (cmd: string) =>
        spawnSync("sh", ["-c", cmd], { encoding: "utf8" }).stdout.split("\n").filter(Boolean);
      const containers = run(
        `docker ps -a --filter label=${owner} --format '{{.ID}} {{.State}} {{.Label "${LABEL.stack}"}}'`,
      ).map((l) => {
        const [id, state, stack] = l.split(" ");
        return { id: id as string, state: state as string, stack: stack ?? "" };
      });
      return {
        containers,
        networks: run(`docker network ls -q --filter label=${owner}`).length,
        volumes: run(`docker volume ls -q --filter label=${owner}`).length,
      };
    },
    close: async () => {
      await kill(w.server);
      await kill(w.denvd);
      if (existsSync(join(stateDir, "state.json"))) {
        const h = await openTestHost({ stateDir, runId });
        await h.close();
        await removeLabelled(h.docker, { "dev.denv.test": runId });
      }
      await rm(dataDir, { recursive: true, force: true });
    },
  };
  const token = (await w.api("POST", "/v1/hosts/join-token")).data.token;
  const joined = spawnSync(
    process.execPath,
    [denvdBin, "join", "--server", url, "--token", token, "--state-dir", stateDir, "--name", runId],
    { encoding: "utf8" },
  );
  if (joined.status !== 0) throw new Error(`denvd join failed: ${joined.stderr}`);
  await w.startDenvd();
  await w.api("POST", "/v1/projects", { name: "ops-world", kind: "rl-environment", source: "./ops-world" });
  await w.api("PUT", "/v1/projects/ops-world/source", { compose: opsWorldCompose });
  return w;
}
