/**
 * A Harbor task directory as Harbor's own model reads it (task.toml, instruction.md, environment/,
 * tests/, solution/, as Harbor documents it), read as hostile input: the files are read
 * only when they are regular files inside the task (a link is never followed), sizes are bounded,
 * and task.toml is checked with a schema that keeps every field Harbor defines, including the
 * legacy spellings, so that what denv does not map can be listed by name.
 */
import { lstatSync, readdirSync, readFileSync } from "node:fs";
import { join, posix } from "node:path";
import { DenvError } from "@denv/protocol";
import { parse as parseToml } from "smol-toml";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { UsageError } from "../output.ts";

const MAX_TOML_BYTES = 256 * 1024;
const MAX_TEXT_BYTES = 1024 * 1024;

const healthcheck = z.object({
  command: z.string(),
  interval_sec: z.number().optional(),
  timeout_sec: z.number().optional(),
  start_period_sec: z.number().optional(),
  start_interval_sec: z.number().optional(),
  retries: z.number().int().optional(),
});

const networkMode = z.enum(["public", "no-network", "allowlist"]);

/** [environment], with the legacy fields Harbor still accepts (memory, storage, allow_internet). */
const environmentSection = z
  .object({
    build_timeout_sec: z.number().optional(),
    docker_image: z.string().min(1).optional(),
    os: z.enum(["linux", "windows"]).optional(),
    cpus: z.number().positive().optional(),
    memory_mb: z.number().int().positive().optional(),
    storage_mb: z.number().int().positive().optional(),
    gpus: z.number().int().nonnegative().optional(),
    gpu_types: z.array(z.string()).optional(),
    tpu: z.unknown().optional(),
    network_mode: networkMode.optional(),
    allowed_hosts: z.array(z.string()).optional(),
    mcp_servers: z.array(z.unknown()).optional(),
    env: z.record(z.string(), z.string()).optional(),
    skills_dir: z.string().optional(),
    healthcheck: healthcheck.optional(),
    workdir: z.string().optional(),
    memory: z.string().optional(),
    storage: z.string().optional(),
    allow_internet: z.boolean().optional(),
  })
  .passthrough();

const agentSection = z
  .object({
    timeout_sec: z.number().nullable().optional(),
    user: z.union([z.string(), z.number()]).optional(),
    network_mode: networkMode.optional(),
    allowed_hosts: z.array(z.string()).optional(),
  })
  .passthrough();

const verifierSection = z
  .object({
    timeout_sec: z.number().positive().optional(),
    env: z.record(z.string(), z.string()).optional(),
    user: z.union([z.string(), z.number()]).optional(),
    network_mode: networkMode.optional(),
    allowed_hosts: z.array(z.string()).optional(),
    environment_mode: z.enum(["shared", "separate"]).nullable().optional(),
    environment: z.unknown().optional(),
    collect: z.array(z.unknown()).optional(),
  })
  .passthrough();

export const taskTomlSchema = z
  .object({
    schema_version: z.string().optional(),
    version: z.string().optional(),
    source: z.string().nullable().optional(),
    multi_step_reward_strategy: z.string().nullable().optional(),
    artifacts: z.array(z.unknown()).optional(),
    steps: z.array(z.unknown()).optional(),
    task: z
      .object({ name: z.string().optional(), description: z.string().optional() })
      .passthrough()
      .optional(),
    metadata: z.record(z.string(), z.unknown()).optional(),
    agent: agentSection.optional(),
    verifier: verifierSection.optional(),
    solution: z
      .object({ env: z.record(z.string(), z.string()).optional() })
      .passthrough()
      .optional(),
    environment: environmentSection.optional(),
  })
  .passthrough();

export type TaskToml = z.infer<typeof taskTomlSchema>;
export type EnvironmentConfig = z.infer<typeof environmentSection>;
export { environmentSection };

/**
 * An environment directory as Harbor's docker environment reads it: the task's environment/, or
 * for a separate verifier its tests/. A Dockerfile, a compose file, or only files (with docker_image).
 */
export interface HarborEnvironmentDir {
  dir: string;
  dockerfile: string | null;
  compose: string | null;
}

export interface HarborTask {
  dir: string;
  /** The directory's name: the task's short name. */
  name: string;
  toml: TaskToml;
  instruction: string | null;
  environment: HarborEnvironmentDir;
  hasTests: boolean;
  hasSolution: boolean;
}

/** The main service's image as Harbor decides it, and where that came from. */
export interface MainImage {
  /** built: from the directory's Dockerfile; else the image named by the compose file or the config. */
  from: "dockerfile" | "compose" | "docker_image";
  image: string | null;
  dockerfile: string | null;
  /** Where the agent works: [environment].workdir, else the Dockerfile's last WORKDIR, else null. */
  workdir: string | null;
  notes: string[];
}

/** A regular file inside the task, read up to a bound; null when absent. Links are refused. */
export function readTaskFile(dir: string, rel: string, maxBytes = MAX_TEXT_BYTES): string | null {
  const parts = rel.split("/");
  let at = dir;
  for (const [i, part] of parts.entries()) {
    at = join(at, part);
    let st: ReturnType<typeof lstatSync>;
    try {
      st = lstatSync(at);
    } catch {
      return null;
    }
    if (st.isSymbolicLink())
      throw new DenvError(
        "spec_invalid",
        `${at} is a symbolic link: a task's files are read only as regular files`,
      );
    if (i < parts.length - 1 ? !st.isDirectory() : !st.isFile())
      throw new DenvError(
        "spec_invalid",
        `${at} is not a ${i < parts.length - 1 ? "directory" : "regular file"}`,
      );
    if (i === parts.length - 1 && st.size > maxBytes)
      throw new DenvError("spec_invalid", `${at} is ${st.size} bytes; at most ${maxBytes} are read`);
  }
  return readFileSync(at, "utf8");
}

function isDir(p: string): boolean {
  try {
    const st = lstatSync(p);
    return st.isDirectory();
  } catch {
    return false;
  }
}

export function isTaskDir(dir: string): boolean {
  try {
    return lstatSync(join(dir, "task.toml")).isFile();
  } catch {
    return false;
  }
}

/** The task directories under a path: itself when it is one, else its children that are. */
export function findTasks(path: string): string[] {
  if (isTaskDir(path)) return [path];
  if (!isDir(path)) throw new UsageError(`${path} is not a directory`);
  const tasks = readdirSync(path)
    .sort()
    .map((n) => join(path, n))
    .filter((p) => isDir(p) && isTaskDir(p));
  if (tasks.length === 0)
    throw new UsageError(
      `${path} has no task.toml, and no directory in it has one: it is not a Harbor task or dataset`,
    );
  return tasks;
}

/** An environment directory's Dockerfile and compose file (regular files only, never links). */
export function readEnvironmentDir(dir: string): HarborEnvironmentDir {
  return {
    dir,
    dockerfile: readTaskFile(dir, "Dockerfile"),
    compose: readTaskFile(dir, "docker-compose.yaml") ?? readTaskFile(dir, "docker-compose.yml"),
  };
}

/** A task whose content cannot be mapped: refused input (exit 1), naming the field. */
export function refused(message: string): DenvError {
  return new DenvError("spec_invalid", message);
}

/**
 * Harbor's variables in a task's compose file, as Harbor's docker environment sets them, for a
 * compose file that lives at the project's root with the environment's files under environment/.
 */
export function harborVariables(
  text: string,
  name: string,
  cfg: EnvironmentConfig,
  unmapped: string[],
): string {
  const vars: Record<string, string> = {
    CONTEXT_DIR: "./environment",
    MAIN_IMAGE_NAME: `hb__${name}`,
    PREBUILT_IMAGE_NAME: cfg.docker_image ?? `hb__${name}`,
    CPUS: String(cfg.cpus ?? 1),
    MEMORY: `${cfg.memory_mb ?? 2048}M`,
  };
  return text.replace(/\$\{([A-Z_][A-Z0-9_]*)(:?-[^}]*)?\}/g, (whole, v: string) => {
    if (v in vars) return vars[v] as string;
    if (/^(HOST|ENV)_(VERIFIER|AGENT|ARTIFACTS)_LOGS_PATH$/.test(v)) {
      unmapped.push(
        `environment/docker-compose.yaml: \${${v}} (Harbor's log bind mounts): denv keeps /logs in a volume`,
      );
      return "/logs";
    }
    return whole;
  });
}

export type ComposeService = Record<string, unknown>;
export interface ComposeDoc {
  services?: Record<string, ComposeService>;
  volumes?: Record<string, unknown>;
  networks?: Record<string, unknown>;
  "x-denv"?: unknown;
}

/** The environment's compose file, parsed with Harbor's variables set; null when it has none. */
export function environmentCompose(
  env: HarborEnvironmentDir,
  name: string,
  cfg: EnvironmentConfig,
  unmapped: string[],
): ComposeDoc | null {
  if (env.compose === null) return null;
  let doc: unknown;
  try {
    doc = parseYaml(harborVariables(env.compose, name, cfg, unmapped));
  } catch (err) {
    throw refused(`${name}: environment/docker-compose.yaml is not valid YAML: ${(err as Error).message}`);
  }
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== "object" || Array.isArray(doc))
    throw refused(`${name}: environment/docker-compose.yaml is not a mapping`);
  const services = (doc as ComposeDoc).services;
  if (
    services !== undefined &&
    (typeof services !== "object" || services === null || Array.isArray(services))
  )
    throw refused(`${name}: environment/docker-compose.yaml: services is not a mapping`);
  for (const [svc, def] of Object.entries(services ?? {}))
    if (typeof def !== "object" || def === null || Array.isArray(def))
      throw refused(`${name}: environment/docker-compose.yaml: services.${svc} is not a mapping`);
  return doc as ComposeDoc;
}

/** WORKDIR as the Dockerfile's last one says (Harbor's exec falls back to it). */
export function dockerfileWorkdir(dockerfile: string): string | null {
  let w: string | null = null;
  for (const line of dockerfile.split("\n")) {
    const m = /^\s*WORKDIR\s+(\S+)/i.exec(line);
    if (m?.[1]) w = m[1].startsWith("/") ? m[1] : posix.join(w ?? "/", m[1]);
  }
  return w;
}

/**
 * main's image by Harbor's precedence: the directory's Dockerfile is built (docker_image is then
 * only a cache hint, as with --force-build); else the compose file's services.main.image (it
 * overrides the prebuilt image when Harbor merges its files); else [environment].docker_image.
 * Nothing to run is refused, as Harbor would fail to start it.
 */
export function mainImage(
  env: HarborEnvironmentDir,
  name: string,
  cfg: EnvironmentConfig,
  compose: ComposeDoc | null,
): MainImage {
  const notes: string[] = [];
  const composeImage = compose?.services?.main?.image;
  if (composeImage !== undefined && typeof composeImage !== "string")
    throw refused(`${name}: environment/docker-compose.yaml: services.main.image is not a string`);
  const workdirOf = (df: string | null) => cfg.workdir ?? (df ? dockerfileWorkdir(df) : null);
  if (env.dockerfile !== null) {
    if (cfg.docker_image)
      notes.push(
        `[environment].docker_image ${cfg.docker_image}: the Dockerfile is built instead (Harbor's --force-build)`,
      );
    return {
      from: "dockerfile",
      image: null,
      dockerfile: env.dockerfile,
      workdir: workdirOf(env.dockerfile),
      notes,
    };
  }
  if (composeImage) {
    if (cfg.docker_image && cfg.docker_image !== composeImage)
      notes.push(
        `[environment].docker_image ${cfg.docker_image}: environment/docker-compose.yaml's services.main.image ${composeImage} is used (it overrides the prebuilt image in Harbor's merged compose files)`,
      );
    return { from: "compose", image: composeImage, dockerfile: null, workdir: workdirOf(null), notes };
  }
  if (cfg.docker_image)
    return {
      from: "docker_image",
      image: cfg.docker_image,
      dockerfile: null,
      workdir: workdirOf(null),
      notes,
    };
  throw refused(
    env.compose !== null
      ? `${name}: environment/docker-compose.yaml: services.main has no image, and there is no Dockerfile beside it and no [environment].docker_image; Harbor would not start it either`
      : `${name}: ${env.dir} has no Dockerfile or docker-compose.yaml and [environment] no docker_image; there is nothing to run`,
  );
}

export function readHarborTask(dir: string): HarborTask {
  const text = readTaskFile(dir, "task.toml", MAX_TOML_BYTES);
  if (text === null) throw new UsageError(`${dir} has no task.toml`);
  let raw: unknown;
  try {
    raw = parseToml(text);
  } catch (err) {
    throw new DenvError(
      "spec_invalid",
      `${join(dir, "task.toml")} is not valid TOML: ${(err as Error).message.split("\n")[0]}`,
    );
  }
  const parsed = taskTomlSchema.safeParse(raw);
  if (!parsed.success) {
    const i = parsed.error.issues[0];
    throw new DenvError(
      "spec_invalid",
      `${join(dir, "task.toml")}: ${i?.path.join(".") || "(file)"}: ${i?.message}`,
    );
  }
  const name = dir.split("/").filter(Boolean).at(-1) as string;
  // environment/ itself may be missing (a docker_image task); a link there is refused.
  const envDir = join(dir, "environment");
  readTaskFile(dir, "environment/Dockerfile");
  return {
    dir,
    name,
    toml: parsed.data,
    instruction: readTaskFile(dir, "instruction.md"),
    environment: readEnvironmentDir(envDir),
    hasTests: readTaskFile(dir, "tests/test.sh") !== null,
    hasSolution: readTaskFile(dir, "solution/solve.sh") !== null,
  };
}
