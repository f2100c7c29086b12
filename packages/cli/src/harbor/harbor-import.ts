/**
 * A Harbor task → a denv project directory. What Harbor's docker environment supplies for the
 * `main` service (its build or image, `sleep infinity`, the /logs directories, resource limits) is
 * written out; the task's own compose file adds sidecars and overrides; `[verifier]` and tests/
 * become x-denv.verifier, graded as root in `main` on a fork, reading reward.json and else
 * reward.txt as Harbor does; the limits become caps; instruction.md, tests/ and solution/ are kept
 * with the project. Every field that does not map is listed (denv-import.json and the command's
 * output), never dropped silently.
 */
import { randomBytes } from "node:crypto";
import {
  cpSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { join, posix } from "node:path";
import { DenvError, isValidName } from "@denv/protocol";
import tar from "tar-stream";
import { stringify as stringifyYaml } from "yaml";
import {
  type ComposeService,
  type EnvironmentConfig,
  environmentCompose,
  type HarborEnvironmentDir,
  type HarborTask,
  mainImage,
  readTaskFile,
  refused,
} from "./harbor-task.ts";

/** The agent's uid in imported tasks: denv never lets the agent be root. */
export const AGENT_UID = 1000;
/** Where the grader unpacks tests/ and Harbor's convention directories. */
const DEFAULT_WORKDIR = "/app";
/** Each argument of the verifier's command stays under Linux's 128 KiB per-argument limit. */
const CHUNK_CHARS = 96 * 1024;
const MAX_TESTS_BYTES = 512 * 1024;

export interface ImportedTask {
  name: string;
  dir: string;
  unmapped: string[];
  /** The oracle's path in the project, when the task has one. */
  oracle: string | null;
  solutionEnv: Record<string, string>;
}

/** A project name from a task's name: lowercase, [a-z0-9-], starting with a letter. */
export function projectNameFor(taskName: string): string {
  let n = taskName
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .replace(/-{2,}/g, "-");
  if (!/^[a-z]/.test(n)) n = `task-${n}`;
  n = n.slice(0, 50).replace(/-+$/, "");
  if (!isValidName(n))
    throw new DenvError("spec_invalid", `cannot make a project name from the task name ${taskName}`);
  return n;
}

/** tests/ as a tar (links kept as links, never followed), for the grader to unpack at /tests. */
async function testsTar(dir: string): Promise<Buffer> {
  const pack = tar.pack();
  const chunks: Buffer[] = [];
  pack.on("data", (c: unknown) => chunks.push(c as Buffer));
  const done = new Promise<void>((resolve, reject) => {
    pack.on("end", resolve);
    pack.on("error", reject);
  });
  let total = 0;
  const walk = (rel: string) => {
    for (const name of readdirSync(join(dir, rel)).sort()) {
      const r = rel ? `${rel}/${name}` : name;
      const st = lstatSync(join(dir, r));
      const base = { name: r, mode: st.mode & 0o777, mtime: new Date(0), uid: 0, gid: 0 };
      if (st.isSymbolicLink()) {
        throw new DenvError(
          "spec_invalid",
          `${join(dir, r)} is a symbolic link: tests/ is graded as root, so it may hold only files and directories`,
        );
      }
      if (st.isDirectory()) {
        pack.entry({ ...base, name: `${r}/`, type: "directory" });
        walk(r);
      } else if (st.isFile()) {
        total += st.size;
        if (total > MAX_TESTS_BYTES)
          throw new DenvError(
            "spec_invalid",
            `${dir} holds over ${MAX_TESTS_BYTES} bytes; tests are carried in the verifier`,
          );
        pack.entry({ ...base, type: "file" }, readFileSync(join(dir, r)));
      } else throw new DenvError("spec_invalid", `${join(dir, r)} is not a file or directory`);
    }
  };
  walk("");
  pack.finalize();
  await done;
  return Buffer.concat(chunks);
}

const shQuote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;

/**
 * The grader's script, run as root in `main` of the grading fork: tests/ unpacked fresh at /tests
 * (from the arguments after it), /logs/verifier emptied (a reward the agent wrote beforehand counts
 * for nothing), test.sh run as Harbor runs it, then reward.json's "reward", else reward.txt.
 */
function verifierScript(workdir: string, env: Record<string, string>): string {
  const exports = Object.entries(env)
    .map(([k, v]) => `export ${k}=${shQuote(v)}`)
    .join("; ");
  return [
    "set -u",
    "rm -rf /tests /logs/verifier && mkdir -p /tests /logs/verifier /logs/agent /logs/artifacts",
    'printf %s "$@" | base64 -d | tar -x -C /tests',
    "chmod +x /tests/test.sh",
    ...(exports ? [exports] : []),
    `cd ${shQuote(workdir)} 2>/dev/null || cd /`,
    "(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1",
    'echo "test.sh exited $?"',
    "tail -c 2000 /logs/verifier/test-stdout.txt",
    "if [ -s /logs/verifier/reward.json ]; then",
    `  sed -n 's/.*"reward"[[:space:]]*:[[:space:]]*\\([-+0-9.eE]*\\).*/\\1/p' /logs/verifier/reward.json | head -n 1 > "$DENV_REWARD_FILE"`,
    "elif [ -s /logs/verifier/reward.txt ]; then",
    '  head -c 64 /logs/verifier/reward.txt > "$DENV_REWARD_FILE"',
    "else",
    '  echo "test.sh wrote neither /logs/verifier/reward.json nor reward.txt" >&2; exit 1',
    "fi",
  ].join("\n");
}

/** The lines denv appends to the task's Dockerfile: the agent's user, and Harbor's directories. */
function denvLayer(workdir: string): string {
  return [
    "",
    "# Added by denv import harbor: the agent runs as uid 1000 (never root), owning its workdir",
    "# and Harbor's /logs directories; Harbor's main container keeps running with sleep infinity.",
    "USER root",
    `RUN (id -u ${AGENT_UID} >/dev/null 2>&1 || useradd -m -u ${AGENT_UID} agent 2>/dev/null || adduser -D -u ${AGENT_UID} agent) && \\`,
    `    mkdir -p ${shQuote(workdir)} /logs/agent /logs/verifier /logs/artifacts && \\`,
    `    chown -R ${AGENT_UID}:${AGENT_UID} ${shQuote(workdir)} /logs/agent /logs/artifacts`,
    "",
  ].join("\n");
}

/** Rewrites a task compose service's build context to the project's root; drops bind mounts, listed. */
function adoptService(name: string, svc: ComposeService, unmapped: string[]): ComposeService {
  const out = { ...svc };
  const build = out.build;
  const ctx = typeof build === "string" ? build : (build as { context?: string } | undefined)?.context;
  if (build !== undefined) {
    const context = posix.join("environment", ctx ?? ".");
    if (context.startsWith(".."))
      throw new DenvError("spec_invalid", `service ${name}'s build context leaves environment/`);
    out.build =
      typeof build === "string" ? `./${context}` : { ...(build as object), context: `./${context}` };
  }
  if (Array.isArray(out.volumes)) {
    out.volumes = out.volumes.filter((v) => {
      const s = typeof v === "string" ? v : String((v as { source?: string }).source ?? "");
      const bind = typeof v === "string" ? /^[./~]/.test(s) : (v as { type?: string }).type === "bind";
      if (bind)
        unmapped.push(
          `environment/docker-compose.yaml: services.${name}.volumes ${JSON.stringify(v)}: a bind mount reaches the host; bake the files into the image`,
        );
      return !bind;
    });
  }
  return out;
}

/**
 * Writes the denv project for one task under `outDir/<project name>`; returns what it made. It is
 * written beside, then moved into place: a task refused half-way leaves nothing behind.
 */
export async function importHarborTask(t: HarborTask, outDir: string): Promise<ImportedTask> {
  const name = projectNameFor(t.name);
  const final = join(outDir, name);
  const staging = join(outDir, `.${name}.importing-${randomBytes(4).toString("hex")}`);
  try {
    const imported = await writeHarborProject(t, name, staging);
    rmSync(final, { recursive: true, force: true });
    renameSync(staging, final);
    return { ...imported, dir: final };
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

/** Copies a directory of the task into the project, links as links (never followed). */
function copyInto(from: string, to: string): void {
  try {
    lstatSync(from);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
    throw err;
  }
  cpSync(from, to, { recursive: true, verbatimSymlinks: true, dereference: false });
}

/**
 * How main and its neighbours run, from one environment directory, as Harbor's docker environment
 * composes them: main's image by Harbor's precedence (harbor-task.ts), `sleep infinity`, the
 * workdir in a volume (it survives snapshot and fork), resource limits, env and healthcheck from
 * the config, and the directory's compose file on top (sidecars as they are, main's overrides
 * merged). `agentUid` set (the importer): the agent's user is made and main runs as it; null (the
 * Harbor adapter): the image's own users, as Harbor runs them. The files are already copied to
 * `projectDir/environment`.
 */
function environmentServices(
  env: HarborEnvironmentDir,
  name: string,
  cfg: EnvironmentConfig,
  projectDir: string,
  agentUid: number | null,
  unmapped: string[],
): {
  services: Record<string, ComposeService>;
  volumes: Record<string, unknown>;
  networks: Record<string, unknown> | undefined;
  xDenv: unknown;
  workdir: string;
} {
  const doc = environmentCompose(env, name, cfg, unmapped);
  const img = mainImage(env, name, cfg, doc);
  unmapped.push(...img.notes);
  const workdir = img.workdir ?? DEFAULT_WORKDIR;
  const main: ComposeService = { command: ["sh", "-c", "sleep infinity"] };
  if (agentUid !== null) {
    // With docker_image alone, Harbor uploads environment/'s files into the workdir after start:
    // here they go into the image's workdir, which seeds the workdir volume the same way.
    const uploaded =
      img.from === "docker_image" && env.compose === null
        ? readdirSync(join(projectDir, "environment")).filter((f) => f !== "Dockerfile.denv")
        : [];
    const copies = uploaded.map(
      (f) => `COPY --chown=${agentUid}:${agentUid} ${JSON.stringify([f, posix.join(workdir, f)])}`,
    );
    const base = img.dockerfile ?? `FROM ${img.image}\n`;
    writeFileSync(
      join(projectDir, "environment", "Dockerfile.denv"),
      `${base.trimEnd()}\n${denvLayer(workdir)}${copies.length ? `${copies.join("\n")}\n` : ""}`,
    );
    main.build = { context: "./environment", dockerfile: "Dockerfile.denv" };
    main.user = `${agentUid}:${agentUid}`;
  } else if (img.dockerfile !== null) main.build = { context: "./environment", dockerfile: "Dockerfile" };
  else main.image = img.image;
  if (agentUid !== null || img.workdir !== null) main.working_dir = workdir;
  main.volumes = [
    ...(agentUid !== null || img.workdir !== null ? [`workdir:${workdir}`] : []),
    ...(agentUid !== null ? ["logs:/logs"] : []),
  ];
  if (cfg.cpus !== undefined) main.cpus = cfg.cpus;
  const memoryMb = cfg.memory_mb ?? (cfg.memory ? parseLegacySizeMb(cfg.memory) : undefined);
  if (memoryMb !== undefined) main.mem_limit = `${memoryMb}m`;
  if (cfg.memory !== undefined)
    unmapped.push(`[environment].memory ${cfg.memory}: read as memory_mb (legacy spelling)`);
  if (cfg.env && Object.keys(cfg.env).length) {
    main.environment = cfg.env;
    for (const [k, v] of Object.entries(cfg.env))
      if (/\$\{/.test(v))
        unmapped.push(
          `[environment].env.${k} = ${v}: a host variable, resolved from the project's .env at deploy`,
        );
  }
  if (cfg.healthcheck) {
    const h = cfg.healthcheck;
    main.healthcheck = {
      test: ["CMD-SHELL", h.command],
      interval: `${h.interval_sec ?? 5}s`,
      timeout: `${h.timeout_sec ?? 30}s`,
      start_period: `${h.start_period_sec ?? 0}s`,
      retries: h.retries ?? 3,
    };
  }
  for (const [field, why] of [
    ["storage_mb", "disk quotas are per dataset in denv, not per task"],
    ["storage", "disk quotas are per dataset in denv, not per task"],
    ["gpus", "GPU passthrough is not available yet"],
    ["gpu_types", "GPU passthrough is not available yet"],
    ["tpu", "TPUs are not available"],
    ["mcp_servers", "MCP servers are not wired by the import; add them as services"],
    ["skills_dir", "skills are not uploaded by denv"],
    ["build_timeout_sec", "builds are bounded by the host (30 minutes)"],
    ["allowed_hosts", "egress is allow or deny in denv, no allowlist"],
  ] as const) {
    const v = (cfg as Record<string, unknown>)[field];
    if (v !== undefined && !(field === "gpus" && v === 0))
      unmapped.push(`[environment].${field} = ${JSON.stringify(v)}: ${why}`);
  }

  // The directory's compose file: sidecars as they are, and overrides of main merged in.
  const services: Record<string, ComposeService> = {};
  const volumes: Record<string, unknown> = {
    ...((main.volumes as string[]).length ? { workdir: {} } : {}),
    ...(agentUid !== null ? { logs: {} } : {}),
  };
  for (const [svcName, svc] of Object.entries(doc?.services ?? {})) {
    if (svcName !== "main") {
      services[svcName] = adoptService(svcName, svc, unmapped);
      continue;
    }
    for (const [k, v] of Object.entries(svc)) {
      if (k === "image" && img.from !== "dockerfile") continue; // main's image, above
      const supplied =
        agentUid !== null ? ["build", "image", "command", "volumes", "user"] : ["build", "image"];
      if (supplied.includes(k)) {
        unmapped.push(
          `environment/docker-compose.yaml: services.main.${k}: Harbor supplies main's ${k}, and so does denv`,
        );
        continue;
      }
      if (k === "volumes" && Array.isArray(v)) {
        const adopted = adoptService("main", { volumes: v }, unmapped).volumes as unknown[];
        main.volumes = [...(main.volumes as unknown[]), ...adopted];
        continue;
      }
      main[k] = v;
    }
  }
  Object.assign(volumes, doc?.volumes ?? {});
  return {
    services: { main, ...services },
    volumes,
    networks: doc?.networks,
    xDenv: doc?.["x-denv"],
    workdir,
  };
}

export interface EnvironmentProject {
  name: string;
  dir: string;
  /** x-denv.kind as written (the project is created with the same). */
  kind: string;
  unmapped: string[];
}

/**
 * One environment directory (a task's environment/, or a separate verifier's tests/) → a denv
 * project that runs it as Harbor's docker environment does, for the Harbor adapter: the same
 * reading as the importer's, with the image's own users (Harbor's agent and verifier users are the
 * adapter's to apply) and no verifier (Harbor runs its own). Written beside, then moved into place.
 */
export async function importHarborEnvironment(
  envDir: HarborEnvironmentDir,
  cfg: EnvironmentConfig,
  opts: { name: string; out: string; egress: "allow" | "deny" },
): Promise<EnvironmentProject> {
  if (!isValidName(opts.name)) throw refused(`${opts.name} is not a valid project name`);
  const staging = `${opts.out}.importing-${randomBytes(4).toString("hex")}`;
  try {
    const unmapped: string[] = [];
    mkdirSync(staging, { recursive: true });
    copyInto(envDir.dir, join(staging, "environment"));
    const { services, volumes, networks, xDenv } = environmentServices(
      envDir,
      opts.name,
      cfg,
      staging,
      null,
      unmapped,
    );
    // A compose file with its own x-denv block (a verifier, say) keeps it as written.
    const compose = {
      name: opts.name,
      "x-denv": xDenv ?? { kind: "agent", egress: opts.egress },
      services,
      volumes,
      ...(networks ? { networks } : {}),
    };
    writeFileSync(
      join(staging, "docker-compose.yaml"),
      `# Harbor's environment ${envDir.dir}, as the denv Harbor adapter runs it.\n${stringifyYaml(compose, { lineWidth: 0, version: "1.1", aliasDuplicateObjects: false })}`,
    );
    rmSync(opts.out, { recursive: true, force: true });
    renameSync(staging, opts.out);
    const declared = (xDenv as { kind?: unknown } | undefined)?.kind;
    const kind = typeof declared === "string" ? declared : xDenv === undefined ? "agent" : "rl-environment";
    return { name: opts.name, dir: opts.out, kind, unmapped };
  } finally {
    rmSync(staging, { recursive: true, force: true });
  }
}

async function writeHarborProject(t: HarborTask, name: string, dir: string): Promise<ImportedTask> {
  const unmapped: string[] = [];
  const toml = t.toml;
  const env = toml.environment ?? {};
  if (toml.steps?.length) throw refused(`${t.name}: [[steps]]: multi-step tasks are not imported yet`);
  if (env.os === "windows")
    throw refused(`${t.name}: [environment].os windows: Windows tasks cannot run on denv's Linux hosts`);
  if (!t.hasTests) throw refused(`${t.name}: tests/test.sh is missing; Harbor's verifier needs it`);
  // main's image is decided (or the task refused) before anything is written.
  mainImage(t.environment, t.name, env, environmentCompose(t.environment, t.name, env, []));

  mkdirSync(dir, { recursive: true });
  for (const sub of ["environment", "tests", "solution"]) copyInto(join(t.dir, sub), join(dir, sub));
  mkdirSync(join(dir, "environment"), { recursive: true });
  if (t.instruction !== null) writeFileSync(join(dir, "instruction.md"), t.instruction);
  writeFileSync(join(dir, "task.toml"), readTaskFile(t.dir, "task.toml") as string);

  const agentUser = toml.agent?.user;
  if (agentUser !== undefined && String(agentUser) !== String(AGENT_UID))
    unmapped.push(
      `[agent].user ${agentUser}: the agent runs as uid ${AGENT_UID} (denv never runs an agent as root)`,
    );
  if (agentUser === undefined)
    unmapped.push(
      `[agent].user unset (root in Harbor): the agent runs as uid ${AGENT_UID}; a solution needing root fails`,
    );
  const { services, volumes, networks, xDenv, workdir } = environmentServices(
    t.environment,
    t.name,
    env,
    dir,
    AGENT_UID,
    unmapped,
  );
  const mode = env.network_mode ?? (env.allow_internet === false ? "no-network" : "public");
  if (mode === "allowlist")
    unmapped.push("[environment].network_mode allowlist: egress is denied (denv has no allowlist)");

  const verifier = toml.verifier ?? {};
  if (verifier.user !== undefined)
    unmapped.push(`[verifier].user ${verifier.user}: denv's grader runs as root in main`);
  if (verifier.environment_mode === "separate" || verifier.environment !== undefined)
    unmapped.push(
      "[verifier] separate environment: graded in main on a fork of the episode (denv's own separation)",
    );
  if (verifier.collect?.length) unmapped.push("[[verifier.collect]]: collect hooks are not run");
  if (toml.artifacts?.length)
    unmapped.push("artifacts: denv keeps the whole workdir and /logs in the version instead");
  if (toml.agent?.timeout_sec)
    unmapped.push(
      `[agent].timeout_sec ${toml.agent.timeout_sec}: the episode's length is the harness's to bound`,
    );
  for (const k of ["network_mode", "allowed_hosts"] as const) {
    if (toml.agent?.[k] !== undefined)
      unmapped.push(`[agent].${k}: egress is one setting for the whole episode`);
    if (verifier[k] !== undefined) unmapped.push(`[verifier].${k}: the grader runs on the fork's network`);
  }

  const encoded = (await testsTar(join(t.dir, "tests"))).toString("base64");
  const chunks: string[] = [];
  for (let i = 0; i < encoded.length; i += CHUNK_CHARS) chunks.push(encoded.slice(i, i + CHUNK_CHARS));
  const timeoutSec = verifier.timeout_sec ?? 600;

  const compose = {
    name,
    "x-denv": {
      kind: "rl-environment",
      egress: mode === "public" ? "allow" : "deny",
      // Harbor's tasks run on the real clock; freeze it here when replays must be identical.
      clock: "real",
      agent: { service: "main" },
      verifier: {
        service: "main",
        // $$: a literal $ (compose interpolates the file's $VAR).
        command: [
          "sh",
          "-c",
          verifierScript(workdir, verifier.env ?? {}).replace(/\$/g, "$$$$"),
          "harbor-tests",
          ...chunks,
        ],
        timeout: `${Math.ceil(timeoutSec)}s`,
      },
    },
    services,
    volumes,
    ...(networks ? { networks } : {}),
  };
  if (xDenv !== undefined)
    unmapped.push("environment/docker-compose.yaml: x-denv: the import writes its own block from task.toml");
  const header = `# Imported from the Harbor task ${t.name} by \`denv import harbor\`.\n# What did not map is listed in denv-import.json.\n`;
  writeFileSync(
    join(dir, "docker-compose.yaml"),
    header + stringifyYaml(compose, { lineWidth: 0, version: "1.1", aliasDuplicateObjects: false }),
  );
  const solutionEnv = toml.solution?.env ?? {};
  const known = new Set([
    "schema_version",
    "version",
    "source",
    "multi_step_reward_strategy",
    "artifacts",
    "steps",
    "task",
    "metadata",
    "agent",
    "verifier",
    "solution",
    "environment",
  ]);
  for (const k of Object.keys(toml))
    if (!known.has(k)) unmapped.push(`${k}: not a field denv knows in task.toml`);
  const imported: ImportedTask = {
    name,
    dir,
    unmapped,
    oracle: t.hasSolution ? "solution" : null,
    solutionEnv,
  };
  writeFileSync(
    join(dir, "denv-import.json"),
    `${JSON.stringify({ from: "harbor", task: t.name, source: t.dir, unmapped, oracle: imported.oracle, solution_env: solutionEnv }, null, 2)}\n`,
  );
  return imported;
}

function parseLegacySizeMb(s: string): number | undefined {
  const m = /^(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?$/i.exec(s.trim());
  if (!m) return undefined;
  const n = Number(m[1]);
  const unit = (m[2] ?? "").toUpperCase();
  const mb = unit === "G" ? n * 1024 : unit === "T" ? n * 1024 * 1024 : unit === "K" ? n / 1024 : n;
  return Math.max(1, Math.round(mb));
}
