/**
 * The seed's journey on examples/ops-world, as a user runs it, with the real `denv` command:
 * denv up, login, project create, deploy alpha (phases live), fork rollout-017, exec a psql count,
 * files put and get, snapshot mid-episode and fork rollout-017-b, a live snapshot and a live fork
 * (rollout-017-live, its Redis the same process), a scripted agent answer, verify
 * with its reward (and a wrong answer's), rollback, the deploy's phase log — each step printed with its duration. Everything it creates
 * is removed at the end (and at the start, if an earlier run was interrupted).
 *
 *   node scripts/journey.ts            (scripts/main.sh runs it after the set-up)
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const root = join(import.meta.dirname, "..");
const bin = join(root, "packages/cli/bin/denv.js");
const dataDir = process.env.DENV_JOURNEY_DIR ?? "/var/lib/denv-journey";
const port = process.env.DENV_JOURNEY_PORT ?? "7077";
const work = mkdtempSync(join(tmpdir(), "denv-journey-"));
const env = { ...process.env, DENV_CONFIG: join(work, "config.json"), DENV_NO_STDIN: "1" };
const started = performance.now();
let failures = 0;

function step(title: string): void {
  process.stdout.write(`\n▶ ${title}\n`);
}

/** Runs `denv ...args`, streaming its output; returns stdout. Fails the journey on a bad exit. */
function denv(args: string[], options: { expectExit?: number; quiet?: boolean } = {}): string {
  const t = performance.now();
  process.stdout.write(`$ denv ${args.map((a) => (/\s|"/.test(a) ? JSON.stringify(a) : a)).join(" ")}\n`);
  const r = spawnSync(process.execPath, [bin, ...args], {
    env,
    encoding: "utf8",
    stdio: ["ignore", "pipe", "pipe"],
  });
  if (!options.quiet) process.stdout.write(r.stdout);
  process.stderr.write(r.stderr);
  const want = options.expectExit ?? 0;
  process.stdout.write(`  (${Math.round(performance.now() - t)} ms, exit ${r.status})\n`);
  if (r.status !== want) {
    failures++;
    throw new Error(`denv ${args[0]} exited ${r.status}, expected ${want}`);
  }
  return r.stdout;
}

function check(condition: boolean, what: string): void {
  process.stdout.write(`  ${condition ? "✓" : "✗"} ${what}\n`);
  if (!condition) {
    failures++;
    throw new Error(`check failed: ${what}`);
  }
}

/** Leftovers of an interrupted run: its stacks, its pool, its state. */
async function cleanPrevious(): Promise<void> {
  if (!existsSync(dataDir)) return;
  const { BtrfsDriver, Denvd, DockerRuntime } = await import("@denv/denvd");
  const stateDir = join(dataDir, "denvd");
  const storage = new BtrfsDriver({ stateDir });
  if (existsSync(join(stateDir, "state.json"))) {
    const d = await Denvd.open({ stateDir, storage, runtime: new DockerRuntime() });
    for (const e of d.stacks()) await d.destroy(e.id);
    for (const v of d.versions()) await d.deleteVersion(v.id);
  }
  await storage.unmount().catch(() => {});
  rmSync(dataDir, { recursive: true, force: true });
}

async function startUp(): Promise<{ child: ChildProcess; server: string; key: string; signIn: string }> {
  const child = spawn(process.execPath, [bin, "up", "--port", port, "--data-dir", dataDir, "--json"], {
    env,
    stdio: ["ignore", "pipe", "inherit"],
  });
  let out = "";
  return new Promise((resolve, reject) => {
    child.stdout?.on("data", (c: Buffer) => {
      out += c.toString();
      const m = /\{[\s\S]*\}/.exec(out);
      if (m) {
        try {
          const info = JSON.parse(m[0]) as {
            server?: string;
            api_key?: string;
            console_sign_in?: string;
            ok?: boolean;
            error?: { code: string; message: string };
          };
          // `--json` reports a failure as {ok: false, error} on stdout, not as the address.
          if (info.ok === false || !info.server || !info.api_key || !info.console_sign_in)
            reject(new Error(`denv up failed: ${info.error?.code}: ${info.error?.message ?? m[0]}`));
          else resolve({ child, server: info.server, key: info.api_key, signIn: info.console_sign_in });
        } catch {}
      }
    });
    child.on("exit", (code) => reject(new Error(`denv up exited (${code}): ${out}`)));
  });
}

async function main(): Promise<void> {
  await cleanPrevious();
  step("denv up: a server on SQLite and a denvd on this machine, joined to it");
  let t = performance.now();
  const up = await startUp();
  process.stdout.write(`  server ${up.server}, ready in ${Math.round(performance.now() - t)} ms\n`);
  try {
    step("the console: denv up's sign-in link makes an account in its own team");
    const token = new URL(up.signIn.replace("/#/", "/")).searchParams.get("invitation") ?? "";
    check(up.signIn.startsWith(`${up.server}/#/join?invitation=`), "a link to the console's join page");
    const signedUp = await fetch(`${up.server}/v1/auth/signup`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ email: "me@example.com", password: "journey password 1", invitation: token }),
    });
    const session = (await signedUp.json()) as { team?: { name: string }; role?: string };
    check(
      signedUp.status === 201 && session.team?.name === "default" && session.role === "admin",
      "signed up into denv up's team as its admin (not a new, empty team)",
    );

    step("login");
    denv(["login", "--server", up.server, "--api-key", up.key]);
    denv(["host", "list"]);
    const hosts = JSON.parse(denv(["host", "list", "--json"], { quiet: true })).hosts;
    check(
      hosts.length === 1 && hosts[0].storage === "btrfs" && hosts[0].connected,
      "one host joined, on btrfs, connected",
    );

    step("project create");
    denv([
      "project",
      "create",
      "--kind",
      "rl-environment",
      "--source",
      join(root, "examples/ops-world"),
      "ops-world",
    ]);

    step("deploy alpha, phases live");
    t = performance.now();
    denv(["deploy", "--project", "ops-world", "--env", "alpha", "--wait"]);
    const deployMs = Math.round(performance.now() - t);
    const alpha = JSON.parse(denv(["env", "show", "alpha", "--json"], { quiet: true }));
    const deployId = alpha.deployments[0].id as string;
    const firstVersion = alpha.current_version_id as string;

    step("a port URL: on an origin of its own, never the console's");
    const minted = await fetch(`${up.server}/v1/envs/${alpha.id}/ports/5432`, {
      method: "POST",
      headers: { authorization: `Bearer ${up.key}`, "content-type": "application/json" },
      body: "{}",
    });
    const portUrl = new URL(((await minted.json()) as { url: string }).url);
    process.stdout.write(`  ${portUrl.origin}/v1/tunnels/…\n`);
    check(portUrl.origin !== new URL(up.server).origin, "another origin than the console's");
    check(
      portUrl.hostname !== new URL(up.server).hostname,
      "another site: the console's cookie is never sent there",
    );
    check(
      (await fetch(`${up.server}${portUrl.pathname}/`)).status === 404,
      "the console's origin serves no port URL",
    );

    step("fork rollout-017 from alpha");
    denv(["fork", "--name", "rollout-017", "alpha"]);

    step("exec a psql count in rollout-017");
    const count = denv([
      "exec",
      "--service",
      "opsbox",
      "rollout-017",
      "--",
      "psql",
      "-tAc",
      "select count(*) from orders",
    ]);
    check(count.trim() === "100000", "rollout-017 holds the 100,000 seeded orders");

    step("files put and get");
    const fixtures = join(work, "fixtures");
    mkdirSync(fixtures, { recursive: true });
    writeFileSync(join(fixtures, "hint.txt"), "look at the orders table\n");
    // The seed's own command: the files are the agent's (its service's user), so it can edit them.
    denv(["files", "put", "rollout-017", "--service", "opsbox", fixtures, "/home/ubuntu/fixtures"]);
    const edited = denv([
      "exec",
      "--service",
      "opsbox",
      "rollout-017",
      "--",
      "sh",
      "-c",
      "echo 'and the refunds' >> /home/ubuntu/fixtures/hint.txt && stat -c %U /home/ubuntu/fixtures/hint.txt",
    ]);
    check(edited.trim() === "ubuntu", "the agent owns what was put for it, and edits it");
    const back = join(work, "out");
    denv([
      "files",
      "get",
      "rollout-017",
      "--service",
      "opsbox",
      "/home/ubuntu/fixtures/hint.txt",
      `${back}/`,
    ]);
    check(
      readFileSync(join(back, "hint.txt"), "utf8") === "look at the orders table\nand the refunds\n",
      "the file came back, with the agent's edit",
    );

    step("snapshot mid-episode, and fork rollout-017-b from it");
    denv([
      "exec",
      "--service",
      "opsbox",
      "rollout-017",
      "--",
      "sh",
      "-c",
      "echo 'step 1 done' > /home/ubuntu/progress.txt",
    ]);
    denv(["snapshot", "rollout-017"]);
    denv(["fork", "--name", "rollout-017-b", "rollout-017"]);
    const progress = denv([
      "exec",
      "--service",
      "opsbox",
      "rollout-017-b",
      "--",
      "cat",
      "/home/ubuntu/progress.txt",
    ]);
    check(progress.trim() === "step 1 done", "rollout-017-b starts from the middle of the episode");

    step("a live snapshot, and a live fork that goes on with every process's memory");
    const redis = (envName: string, command: string) =>
      denv(["exec", "--service", "opsbox", envName, "--", "sh", "-c", `redis-cli -h queue ${command}`], {
        quiet: true,
      }).trim();
    // Held only by the running Redis: its run id (drawn at each start) and a setting changed now.
    redis("rollout-017", "config set maxmemory-samples 7");
    const runId = /^run_id:(\w+)/m.exec(redis("rollout-017", "info server"))?.[1];
    denv(["snapshot", "--live", "rollout-017"]);
    denv(["fork", "--name", "rollout-017-live", "rollout-017"]);
    check(
      !!runId && /^run_id:(\w+)/m.exec(redis("rollout-017-live", "info server"))?.[1] === runId,
      "rollout-017-live's Redis is its parent's process, restored from memory (same run id)",
    );
    check(
      redis("rollout-017-live", "config get maxmemory-samples").endsWith("7"),
      "with the setting its parent changed at run time",
    );

    step("a scripted agent answers the task (instruction.md)");
    denv([
      "exec",
      "--service",
      "opsbox",
      "rollout-017",
      "--",
      "sh",
      "-c",
      "psql -tAc \"select count(*) from orders where status = 'failed' and total_cents > 50000\" > /home/ubuntu/answer.txt && cat /home/ubuntu/answer.txt",
    ]);
    const whoami = denv(["exec", "--service", "opsbox", "rollout-017", "--", "id", "-u"]);
    check(whoami.trim() === "1000", "the agent's shell is not root");

    step("verify rollout-017: graded on a fork, as a separate principal");
    const verdict = JSON.parse(
      denv(["verify", "rollout-017", "--json"], { quiet: !process.env.DENV_JOURNEY_DEBUG }),
    );
    for (const p of verdict.phases)
      process.stdout.write(
        `  ${p.status === "succeeded" ? "✓" : p.status === "skipped" ? "-" : "✗"} ${p.name.padEnd(9)} ${p.duration_ms ?? 0} ms\n`,
      );
    process.stdout.write(`  reward ${verdict.reward}\n`);
    check(verdict.reward === 1, "the right answer earns reward 1");
    denv([
      "exec",
      "--service",
      "opsbox",
      "rollout-017-b",
      "--",
      "sh",
      "-c",
      "echo 42 > /home/ubuntu/answer.txt",
    ]);
    const wrong = JSON.parse(denv(["verify", "rollout-017-b", "--json"], { quiet: true }));
    process.stdout.write(`  rollout-017-b (answer 42): reward ${wrong.reward}\n`);
    check(wrong.reward === 0, "a wrong answer earns reward 0");

    step("rollback: alpha to its first version, health re-checked");
    denv(["exec", "--service", "opsbox", "alpha", "--", "psql", "-qc", "delete from orders where id <= 100"]);
    denv(["rollback", "alpha", firstVersion]);
    const restored = denv([
      "exec",
      "--service",
      "opsbox",
      "alpha",
      "--",
      "psql",
      "-tAc",
      "select count(*) from orders",
    ]);
    check(restored.trim() === "100000", "alpha has its 100,000 orders again");

    step("the deploy's phase log, with its evidence");
    denv(["deployment", "show", deployId]);

    const envs = JSON.parse(denv(["env", "list", "--json"], { quiet: true })).environments.map(
      (e: { name: string }) => e.name,
    );
    check(
      ["alpha", "rollout-017", "rollout-017-b"].every((n) => envs.includes(n)),
      "env list shows alpha and both rollouts",
    );

    step("clean up");
    for (const e of ["rollout-017-live", "rollout-017-b", "rollout-017", "alpha"])
      denv(["env", "destroy", e]);
    process.stdout.write(
      `\njourney done in ${Math.round((performance.now() - started) / 1000)} s (deploy ${deployMs} ms)\n`,
    );
  } finally {
    up.child.kill("SIGINT");
    await new Promise((r) => up.child.on("exit", r));
    await cleanPrevious();
    rmSync(work, { recursive: true, force: true });
  }
}

try {
  await main();
} catch (err) {
  process.stderr.write(`\njourney failed: ${(err as Error).message}\n`);
  process.exitCode = 1;
}
if (failures) process.exitCode = 1;
