import type { ResolvedSpec } from "@denv/protocol";
import type { Env } from "./interpolate.ts";
import type { FieldPath } from "./issues.ts";
import type { IssueList } from "./load-compose.ts";
import { parseBytes, parseDurationMs } from "./units.ts";

export interface ServiceContext {
  issues: IssueList;
  env: Env;
  noBuild: boolean;
  projectName: string | null;
  /** Names of every active service in the file. */
  serviceNames: ReadonlySet<string>;
  declaredVolumes: ReadonlySet<string>;
  declaredNetworks: ReadonlySet<string>;
  /** The file's top-level configs: name → the project file it reads. */
  configFiles?: ReadonlyMap<string, string>;
  /** The file's top-level secrets (a service may name only these). */
  declaredSecrets?: ReadonlySet<string>;
  /**
   * The file's datasets: an anonymous volume adds one of its own here (named from its service and
   * path), as the engine makes a fresh volume for it.
   */
  datasets?: ResolvedSpec["datasets"];
  /** Reads a file relative to the compose file's directory (env_file); undefined when absent. */
  readFile?: ((relativePath: string) => string | undefined) | undefined;
}

export const isRecord = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === "object" && !Array.isArray(v);

export function scalarString(v: unknown): string | undefined {
  if (typeof v === "string") return v;
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  return undefined;
}

export function duration(v: unknown, path: FieldPath, issues: IssueList): number | undefined {
  const ms = typeof v === "string" || typeof v === "number" ? parseDurationMs(v) : undefined;
  if (ms === undefined)
    issues.error("invalid_value", path, `"${String(v)}" is not a duration (e.g. 2s, 1m30s, 500ms)`);
  return ms;
}

export function bytes(v: unknown, path: FieldPath, issues: IssueList): number | undefined {
  const n = typeof v === "string" || typeof v === "number" ? parseBytes(v) : undefined;
  if (n === undefined || n === 0) {
    issues.error("invalid_value", path, `"${String(v)}" is not a memory size (e.g. 2g, 512m, or bytes)`);
    return undefined;
  }
  return n;
}
