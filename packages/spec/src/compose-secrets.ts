/**
 * Compose's top-level `secrets:`: a file in the project (its content travels with the project's
 * source, sealed); a host's environment variable or an external store is refused, there being
 * none to read. And the spec as it is shown, with the files' digests but never their contents.
 */
import { createHash } from "node:crypto";
import type { ResolvedSpec } from "@denv/protocol";
import { nameProblem } from "@denv/protocol";
import type { IssueList } from "./load-compose.ts";

/** Docker's own limit on a secret's size. */
const MAX_SECRET_BYTES = 500 * 1024;

const isRecord = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === "object" && !Array.isArray(v);

export function topLevelSecrets(
  raw: unknown,
  issues: IssueList,
  readFile: ((relativePath: string) => string | undefined) | undefined,
): { declaredSecrets: Set<string>; secretFiles: NonNullable<ResolvedSpec["secret_files"]> } {
  const declaredSecrets = new Set<string>();
  const secretFiles: NonNullable<ResolvedSpec["secret_files"]> = {};
  if (raw !== undefined && raw !== null && !isRecord(raw))
    issues.error("invalid_value", ["secrets"], "secrets is a mapping of secret names");
  for (const [sname, scfg] of Object.entries(isRecord(raw) ? raw : {})) {
    declaredSecrets.add(sname);
    const at = ["secrets", sname];
    const badName = nameProblem(sname);
    if (badName) {
      issues.error("name_invalid", at, `secret name "${sname}" ${badName}`);
      continue;
    }
    if (!isRecord(scfg)) {
      issues.error("invalid_value", at, "a secret is a mapping with file:");
      continue;
    }
    if (scfg.external !== undefined && scfg.external !== false) {
      issues.error(
        "secret_host",
        [...at, "external"],
        `secret ${sname} is external: it lives in a swarm's secret store, which a denv host does not have; give it a file: in the project`,
      );
      continue;
    }
    if (scfg.environment !== undefined) {
      issues.error(
        "secret_host",
        [...at, "environment"],
        `secret ${sname} reads the host's environment variable ${String(scfg.environment)}: denv reads no host variables into secrets; put the value in a file in the project and name it with file:`,
      );
      continue;
    }
    for (const key of Object.keys(scfg))
      if (!["file", "name", "labels"].includes(key))
        issues.error("unsupported_field", [...at, key], `"${key}" is not a secret field denv takes (file:)`);
    const file = scfg.file;
    if (typeof file !== "string" || !file) {
      issues.error("invalid_value", [...at, "file"], `secret ${sname} needs file: (a path in the project)`);
      continue;
    }
    const clean = file.replace(/^\.\//, "");
    if (
      file.startsWith("/") ||
      file.startsWith("~") ||
      clean.split("/").includes("..") ||
      /[\n\r\0]/.test(file)
    ) {
      issues.error(
        "bind_mount",
        [...at, "file"],
        `secret ${sname}'s file ${JSON.stringify(file)} is outside the project: the world must not reach the host; keep the file in the project directory`,
      );
      continue;
    }
    // A file the project cannot give (a link, not a regular file) throws, as for env_file: the
    // caller says what it was.
    const content = readFile?.(clean);
    if (content === undefined) {
      issues.error(
        "invalid_value",
        [...at, "file"],
        `secret ${sname}'s file ${file} was not found in the project`,
      );
      continue;
    }
    const bytes = Buffer.from(content, "utf8");
    if (bytes.length > MAX_SECRET_BYTES) {
      issues.error(
        "invalid_value",
        [...at, "file"],
        `secret ${sname}'s file is ${bytes.length} bytes; a secret is at most ${MAX_SECRET_BYTES}`,
      );
      continue;
    }
    secretFiles[sname] = {
      content_b64: bytes.toString("base64"),
      sha256: `sha256:${createHash("sha256").update(bytes).digest("hex")}`,
    };
  }
  return { declaredSecrets, secretFiles };
}

/** A spec to show (the API, validate --json): file secrets by name and digest, never their contents. */
export function withoutSecretContents<T extends { secret_files?: Record<string, { sha256: string }> }>(
  spec: T,
): T {
  if (!spec.secret_files) return spec;
  return {
    ...spec,
    secret_files: Object.fromEntries(
      Object.entries(spec.secret_files).map(([n, f]) => [n, { sha256: f.sha256, content_b64: "(redacted)" }]),
    ),
  };
}

/**
 * The file's top-level configs: name → the project file it reads. A config with `file:` in the
 * project is mounted read-only like a bind mount of that file (as Compose mounts a config without
 * a swarm); `content:`, `environment:` and `external:` configs are refused with the reason.
 */
export function topLevelConfigs(raw: unknown, issues: IssueList): Map<string, string> {
  const out = new Map<string, string>();
  if (raw !== undefined && raw !== null && !isRecord(raw))
    issues.error("invalid_value", ["configs"], "configs is a mapping of config names");
  for (const [cname, cfg] of Object.entries(isRecord(raw) ? raw : {})) {
    const at = ["configs", cname];
    if (!isRecord(cfg)) {
      issues.error("invalid_value", at, "a config is a mapping with file:");
      continue;
    }
    if (cfg.external !== undefined && cfg.external !== false) {
      issues.error(
        "secret_host",
        [...at, "external"],
        `config ${cname} is external: it lives in a swarm, which a denv host does not have; give it a file: in the project`,
      );
      continue;
    }
    if (cfg.environment !== undefined || cfg.content !== undefined) {
      const key = cfg.environment !== undefined ? "environment" : "content";
      issues.error(
        "unsupported_field",
        [...at, key],
        `config ${cname} takes its text from ${key}:; put the text in a file in the project and name it with file:`,
      );
      continue;
    }
    for (const key of Object.keys(cfg))
      if (!["file", "name", "labels"].includes(key))
        issues.error("unsupported_field", [...at, key], `"${key}" is not a config field denv takes (file:)`);
    if (typeof cfg.file !== "string" || !cfg.file) {
      issues.error("invalid_value", [...at, "file"], `config ${cname} needs file: (a path in the project)`);
      continue;
    }
    out.set(cname, cfg.file);
  }
  return out;
}
