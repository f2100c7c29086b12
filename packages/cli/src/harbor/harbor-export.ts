/**
 * A denv version → a Harbor task directory (Harbor's task model, as its documentation describes it).
 * The agent's service becomes `main`, run from its pinned image (`[environment].docker_image`, which
 * Harbor starts with `sleep infinity`); the other services go in environment/docker-compose.yaml,
 * each by its pinned digest; x-denv.warm runs as one-shot services `main` waits for, so the data
 * the version was snapshotted with is made again at start; egress deny becomes an internal network
 * (sidecars reachable, the world not). The verifier becomes tests/: an image verifier runs in
 * Harbor's separate verifier environment built FROM its pinned image, reading the collected paths
 * as Harbor's artifacts; a verifier in the agent's service runs in main. Whatever cannot be carried
 * is listed in denv-export.json.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import type { ResolvedSpec } from "@denv/protocol";
import { stringify as stringifyToml } from "smol-toml";
import { stringify as stringifyYaml } from "yaml";
import { UsageError } from "../output.ts";

type Service = ResolvedSpec["services"][string];

export interface HarborExport {
  dir: string;
  notExported: string[];
}

const shQuote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;
const seconds = (ms: number) => `${Math.max(0, Math.round(ms / 1000))}s`;

function imageOf(name: string, s: Service, notes: string[]): string {
  const ref = s.image_pinned ?? s.image;
  if (ref.startsWith("sha256:"))
    notes.push(
      `service ${name}: its image was built on the host (${ref.slice(0, 19)}…); its id works only on that engine: push it to a registry to run the task elsewhere`,
    );
  return ref;
}

/** A resolved service back in compose's words (the subset Harbor's compose runs). */
function composeService(name: string, s: Service, notes: string[]): Record<string, unknown> {
  const out: Record<string, unknown> = { image: imageOf(name, s, notes) };
  if (s.entrypoint) out.entrypoint = s.entrypoint;
  if (s.command) out.command = s.command;
  if (Object.keys(s.environment).length) out.environment = s.environment;
  if (s.user) out.user = s.user;
  if (s.working_dir) out.working_dir = s.working_dir;
  if (s.hostname) out.hostname = s.hostname;
  if (s.healthcheck) {
    out.healthcheck = {
      test: s.healthcheck.test,
      interval: seconds(s.healthcheck.interval_ms),
      timeout: seconds(s.healthcheck.timeout_ms),
      start_period: seconds(s.healthcheck.start_period_ms),
      retries: s.healthcheck.retries,
    };
  } else if (s.healthcheck_disabled) out.healthcheck = { disable: true };
  if (Object.keys(s.depends_on).length)
    out.depends_on = Object.fromEntries(
      Object.entries(s.depends_on).map(([d, v]) => [d, { condition: v.condition }]),
    );
  const volumes = s.volumes.map((v) => `${v.dataset}:${v.target}${v.read_only ? ":ro" : ""}`);
  if (volumes.length) out.volumes = volumes;
  if (s.tmpfs.length) out.tmpfs = s.tmpfs.map((t) => t.target);
  out.mem_limit = `${Math.round(s.caps.memory_bytes / 1024 ** 2)}m`;
  out.pids_limit = s.caps.pids;
  out.cpus = s.caps.cpus;
  if (s.init) out.init = true;
  if (s.read_only) out.read_only = true;
  if (s.stop_signal) out.stop_signal = s.stop_signal;
  if (s.volumes.some((v) => v.subpath)) notes.push(`service ${name}: volume subpaths are not exported`);
  return out;
}

/** tests/test.sh for a verifier: denv's conventions ($DENV_REWARD_FILE, else stdout's last line) → Harbor's reward.txt. */
function testScript(command: string[], collectDir: string, header: string): string {
  return `#!/bin/sh
# ${header}
# denv's verifier conventions, as Harbor reads rewards: the reward it writes to $DENV_REWARD_FILE,
# else the last line of its stdout, becomes /logs/verifier/reward.txt.
mkdir -p /logs/verifier
rm -f /logs/verifier/reward.txt /logs/verifier/reward.json
export DENV_COLLECT_DIR=${shQuote(collectDir)}
export DENV_REWARD_FILE=/logs/verifier/denv-reward
${command.map(shQuote).join(" ")} > /logs/verifier/denv-stdout.txt
code=$?
cat /logs/verifier/denv-stdout.txt
if [ -s /logs/verifier/denv-reward ]; then
  head -c 64 /logs/verifier/denv-reward > /logs/verifier/reward.txt
elif [ "$code" = 0 ]; then
  grep -v '^[[:space:]]*$' /logs/verifier/denv-stdout.txt | tail -n 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
`;
}

export function exportHarbor(
  spec: ResolvedSpec,
  args: {
    project: string;
    versionId: string;
    instruction: string | null;
    out: string;
    /** The project's oracle (solution/: relative path → text), written as the task's solution/. */
    solution?: Record<string, string> | null;
  },
): HarborExport {
  const notes: string[] = [];
  const agentName = spec.agent?.service;
  if (!agentName)
    throw new UsageError(`${args.project} has no x-denv.agent.service: Harbor's tasks need an agent (main)`);
  if (!spec.verifier)
    throw new UsageError(`${args.project} has no x-denv.verifier: Harbor's tasks need tests/test.sh`);
  const agent = spec.services[agentName] as Service;
  const dir = join(args.out, args.project);
  mkdirSync(join(dir, "environment"), { recursive: true });
  mkdirSync(join(dir, "tests"), { recursive: true });
  const header = `Exported from denv ${args.project}@${args.versionId} (spec ${spec.hash.slice(0, 19)}…) by \`denv export --harbor\`.`;

  const others = Object.keys(spec.services).filter((n) => n !== agentName);
  const compose: Record<string, unknown> = { services: {} };
  const services = compose.services as Record<string, Record<string, unknown>>;
  // main: Harbor supplies its command and its limits; denv adds the rest. Its image is named here
  // too (the same as docker_image): Harbor's merged files agree, and a compose file whose main has
  // no image is one an environment other than Harbor's docker one cannot start.
  const main: Record<string, unknown> = { image: imageOf(agentName, agent, []) };
  if (Object.keys(agent.environment).length) main.environment = agent.environment;
  if (agent.user) main.user = agent.user;
  if (agent.working_dir) main.working_dir = agent.working_dir;
  const mainVolumes = agent.volumes.map((v) => `${v.dataset}:${v.target}${v.read_only ? ":ro" : ""}`);
  if (mainVolumes.length) main.volumes = mainVolumes;
  const dependsOn: Record<string, { condition: string }> = Object.fromEntries(
    Object.entries(agent.depends_on).map(([d, v]) => [d, { condition: v.condition }]),
  );
  // Other services reach the agent by its own name still.
  if (agentName !== "main") main.networks = { default: { aliases: [agentName] } };
  for (const name of others) {
    if (name === "main")
      throw new UsageError(`a service other than the agent's is named main; Harbor reserves that name`);
    services[name] = composeService(name, spec.services[name] as Service, notes);
  }
  // x-denv.warm: one-shot services in order, each in its service's image and volumes; main waits.
  let previous: string | null = null;
  spec.warm.forEach((w, i) => {
    const svc = spec.services[w.service] as Service;
    const job: Record<string, unknown> = composeService(w.service, svc, []);
    delete job.healthcheck;
    job.entrypoint = [];
    job.command = w.command;
    job.restart = "no";
    // denv warms once every service is healthy: so does the job (the one before it done first).
    const deps: Record<string, { condition: string }> = {};
    for (const n of others) {
      const o = spec.services[n] as Service;
      deps[n] = {
        condition: o.healthcheck && !o.healthcheck_disabled ? "service_healthy" : "service_started",
      };
    }
    if (previous) deps[previous] = { condition: "service_completed_successfully" };
    job.depends_on = deps;
    const jobName = `denv-warm-${i + 1}`;
    services[jobName] = job;
    previous = jobName;
  });
  if (previous) dependsOn[previous] = { condition: "service_completed_successfully" };
  if (spec.warm.length)
    notes.push(
      "volume contents: x-denv.warm runs again at start (denv-warm-N services); the version's snapshot itself is not copied, so data made with randomness differs",
    );
  if (Object.keys(dependsOn).length) main.depends_on = dependsOn;
  services.main = main;
  if (others.length > 0 || spec.warm.length > 0) {
    const volumes = Object.keys(spec.datasets);
    if (volumes.length) compose.volumes = Object.fromEntries(volumes.map((v) => [v, {}]));
    // Harbor's no-network cuts main off from its sidecars: egress deny is an internal network instead.
    if (spec.egress === "deny") compose.networks = { default: { internal: true } };
    writeFileSync(
      join(dir, "environment", "docker-compose.yaml"),
      `# ${header}\n${stringifyYaml(compose, { lineWidth: 0, version: "1.1", aliasDuplicateObjects: false })}`,
    );
  } else if (mainVolumes.length)
    notes.push("the agent's volumes: a single-service task keeps no volume in Harbor");
  if (spec.clock !== "real") notes.push(`x-denv.clock ${spec.clock}: Harbor runs on the real clock`);
  if (spec.pool) notes.push("x-denv.pool: warm pools are denv's");
  if (Object.keys(spec.checkpoint).length) notes.push("x-denv.checkpoint: Harbor takes no snapshots");

  // The verifier.
  const v = spec.verifier;
  const collect = v.collect;
  const toml: Record<string, unknown> = {
    schema_version: "1.3",
    source: `denv:${args.project}@${args.versionId}`,
    ...(collect.length ? { artifacts: collect } : {}),
    task: { name: `denv/${args.project}`, description: `${args.project} at ${args.versionId}` },
    metadata: { denv_version: args.versionId, denv_spec_hash: spec.hash },
    agent: { ...(agent.user ? { user: agent.user } : {}) },
    verifier: { timeout_sec: v.timeout_ms / 1000 } as Record<string, unknown>,
    environment: {
      docker_image: imageOf(agentName, agent, notes),
      cpus: Math.max(1, Math.round(agent.caps.cpus)),
      memory_mb: Math.round(agent.caps.memory_bytes / 1024 ** 2),
      network_mode:
        spec.egress === "deny" && others.length === 0 && spec.warm.length === 0 ? "no-network" : "public",
      ...(agent.working_dir ? { workdir: agent.working_dir } : {}),
    },
  };
  if (v.image) {
    // Harbor's separate verifier environment: built FROM the verifier's pinned image.
    const image = v.image_pinned ?? v.image;
    writeFileSync(
      join(dir, "tests", "Dockerfile"),
      `# ${header}\nFROM ${image}\nCOPY test.sh /tests/test.sh\nRUN chmod 755 /tests/test.sh\n`,
    );
    writeFileSync(join(dir, "tests", "test.sh"), testScript(v.command ?? [], "/", header), { mode: 0o755 });
    Object.assign(toml.verifier as object, {
      environment_mode: "separate",
      user: "root",
      environment: { network_mode: "no-network", memory_mb: 4096, cpus: 2 },
    });
  } else if (v.service === agentName) {
    // The grader's command, as root, in main (Harbor's shared mode), the collected paths in place.
    writeFileSync(join(dir, "tests", "test.sh"), testScript(v.command ?? ["true"], "/", header), {
      mode: 0o755,
    });
    (toml.verifier as Record<string, unknown>).user = "root";
    if (collect.length)
      notes.push("verifier.collect: Harbor's shared verifier reads the paths where they are (not a copy)");
  } else {
    throw new UsageError(
      `the verifier runs in service ${v.service}, not the agent's: Harbor runs tests only in main or in a separate image`,
    );
  }
  if (args.solution && Object.keys(args.solution).length) {
    for (const [rel, text] of Object.entries(args.solution)) {
      mkdirSync(dirname(join(dir, "solution", rel)), { recursive: true });
      writeFileSync(join(dir, "solution", rel), text, { mode: rel.endsWith(".sh") ? 0o755 : 0o644 });
    }
  } else notes.push("solution/: the project has no solution/solve.sh (an oracle); none was written");
  writeFileSync(join(dir, "task.toml"), `# ${header}\n${stringifyToml(toml)}\n`);
  writeFileSync(
    join(dir, "instruction.md"),
    args.instruction ??
      `# ${args.project}\n\n(The project has no instruction.md; write the task for the agent here.)\n`,
  );
  if (args.instruction === null)
    notes.push("instruction.md: the project has none; a placeholder was written");
  writeFileSync(
    join(dir, "denv-export.json"),
    `${JSON.stringify({ to: "harbor", project: args.project, version_id: args.versionId, spec_hash: spec.hash, not_exported: notes }, null, 2)}\n`,
  );
  return { dir, notExported: notes };
}
