/**
 * A Harbor task directory as Harbor's own model reads it (task.toml, instruction.md, environment/,
 * tests/, solution/; ../shared/reference/harbor.md §2), read as hostile input: the files are read
 * only when they are regular files inside the task (a link is never followed), sizes are bounded,
 * and task.toml is checked with a schema that keeps every field Harbor defines, including the
 * legacy spellings, so that what denv does not map can be listed by name.
 */
import { lstatSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { DenvError } from "@denv/protocol";
import { parse as parseToml } from "smol-toml";
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

export interface HarborTask {
  dir: string;
  /** The directory's name: the task's short name. */
  name: string;
  toml: TaskToml;
  instruction: string | null;
  /** What environment/ holds: a Dockerfile, a compose file, or only files (with docker_image). */
  environment: { dockerfile: boolean; compose: string | null };
  hasTests: boolean;
  hasSolution: boolean;
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
  const compose =
    readTaskFile(dir, "environment/docker-compose.yaml") ??
    readTaskFile(dir, "environment/docker-compose.yml");
  return {
    dir,
    name,
    toml: parsed.data,
    instruction: readTaskFile(dir, "instruction.md"),
    environment: { dockerfile: readTaskFile(dir, "environment/Dockerfile") !== null, compose },
    hasTests: readTaskFile(dir, "tests/test.sh") !== null,
    hasSolution: readTaskFile(dir, "solution/solve.sh") !== null,
  };
}
