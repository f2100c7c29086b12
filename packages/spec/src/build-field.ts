/**
 * A service's `build:`, short or long syntax, in the form the host builds it from. The build runs
 * on the target's engine, so a field that would let it reach the host (host networking, privileged
 * steps, the host's secrets or SSH agent, contexts outside the project) is refused with the reason,
 * one that cannot change the image (tags, cache_to, platforms on the host's own) is accepted with a
 * warning, and nothing is dropped silently.
 */
import type { ResolvedService } from "@denv/protocol";
import type { FieldPath } from "./issues.ts";
import type { IssueList } from "./load-compose.ts";

export type ResolvedBuild = NonNullable<ResolvedService["build"]>;

type Handler = "handled" | { ignore: string } | { refuse: string };

const BUILD_FIELDS: Record<string, Handler> = {
  context: "handled",
  dockerfile: "handled",
  args: "handled",
  target: "handled",
  cache_from: "handled",
  no_cache: "handled",
  labels: "handled",
  network: "handled",
  shm_size: { ignore: "build steps get the engine's default /dev/shm" },
  tags: { ignore: "the built image is named by denv and pinned by its id" },
  cache_to: { ignore: "build caches stay on the host that built" },
  platforms: { ignore: "images are built for the host's own platform" },
  pull: { ignore: "base images are used as the host has them, pulled only when missing" },
  isolation: { ignore: "Linux hosts use the default isolation" },
  ulimits: { ignore: "build steps get the engine's default limits" },
  extra_hosts: { ignore: "build steps resolve names as the engine does" },
  privileged: { refuse: "build steps never run privileged: they run on the host's engine" },
  entitlements: { refuse: "build steps get no extra entitlements on the host" },
  secrets: { refuse: "build secrets are read from the host's files; pass values as args instead" },
  ssh: { refuse: "the host's SSH agent is never lent to a build" },
  additional_contexts: {
    refuse: "a build has one context, uploaded with the project; put what it needs inside it",
  },
  dockerfile_inline: { refuse: "write the Dockerfile to a file in the context and name it in dockerfile:" },
};

const isRecord = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === "object" && !Array.isArray(v);

/**
 * A path inside the project (or the context): relative, no `..` leaving it, normalised to forward
 * slashes without `./`. Returns the problem as a string when it is not one.
 */
export function projectRelativePath(p: string, what: string): string | { problem: string } {
  if (p.includes("\0")) return { problem: `${what} has a NUL byte` };
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(p) || /^git@/.test(p))
    return { problem: `${what} is a URL; a build context is a directory of the project, uploaded with it` };
  if (p.startsWith("/") || /^[a-zA-Z]:[\\/]/.test(p))
    return { problem: `${what} is an absolute path; give it relative to the compose file` };
  const parts: string[] = [];
  for (const seg of p.replace(/\\/g, "/").split("/")) {
    if (seg === "" || seg === ".") continue;
    if (seg === "..") {
      if (parts.length === 0)
        return { problem: `${what} leaves the project directory; only files under it are uploaded` };
      parts.pop();
    } else parts.push(seg);
  }
  return parts.join("/") || ".";
}

function stringMap(v: unknown, path: FieldPath, issues: IssueList, what: string): Record<string, string> {
  const out: Record<string, string> = {};
  if (v === undefined || v === null) return out;
  const put = (k: string, val: unknown, at: FieldPath) => {
    if (val === null || val === undefined) {
      // Compose takes a bare ARG from the shell; the control plane has no shell of the user's.
      issues.warn(
        "ignored_field",
        at,
        `${what} ${k} has no value: the Dockerfile's default applies (give it a value to set it)`,
      );
      return;
    }
    if (typeof val === "object") {
      issues.error("invalid_value", at, `${what} ${k} must be a string or number`);
      return;
    }
    out[k] = String(val);
  };
  if (Array.isArray(v)) {
    v.forEach((item, i) => {
      if (typeof item !== "string") {
        issues.error("invalid_value", [...path, i], `${what} entries are "KEY=value" strings`);
        return;
      }
      const eq = item.indexOf("=");
      put(eq === -1 ? item : item.slice(0, eq), eq === -1 ? null : item.slice(eq + 1), [...path, i]);
    });
  } else if (isRecord(v)) {
    for (const [k, val] of Object.entries(v)) put(k, val, [...path, k]);
  } else issues.error("invalid_value", path, `${what} is a list of "KEY=value" or a mapping`);
  return out;
}

/** The build of one service, or null with the issues said when it cannot be one. */
export function buildField(v: unknown, path: FieldPath, issues: IssueList): ResolvedBuild | null {
  const raw: Record<string, unknown> | null = typeof v === "string" ? { context: v } : isRecord(v) ? v : null;
  if (!raw) {
    issues.error("invalid_value", path, "build must be a path or a mapping with context:");
    return null;
  }
  let ok = true;
  for (const key of Object.keys(raw)) {
    const h = BUILD_FIELDS[key];
    if (h === undefined) {
      issues.error("unsupported_field", [...path, key], `"${key}" is not a Compose build field`);
      ok = false;
    } else if (h !== "handled" && "ignore" in h)
      issues.warn("ignored_field", [...path, key], `build.${key} is accepted and ignored: ${h.ignore}`);
    else if (h !== "handled") {
      issues.error("unsupported_field", [...path, key], `build.${key} is refused: ${h.refuse}`);
      ok = false;
    }
  }
  const contextRaw = raw.context ?? ".";
  if (typeof contextRaw !== "string") {
    issues.error("invalid_value", [...path, "context"], "build.context must be a path");
    return null;
  }
  const context = projectRelativePath(contextRaw, "build.context");
  if (typeof context !== "string") {
    issues.error("invalid_value", [...path, "context"], context.problem);
    ok = false;
  }
  let dockerfile = "Dockerfile";
  if (raw.dockerfile !== undefined) {
    const d =
      typeof raw.dockerfile === "string" ? projectRelativePath(raw.dockerfile, "build.dockerfile") : null;
    if (d === null || typeof d !== "string" || d === ".") {
      issues.error(
        "invalid_value",
        [...path, "dockerfile"],
        d && typeof d !== "string"
          ? `${d.problem.replace("project directory", "build context")}`
          : "build.dockerfile must be a file's path inside the build context",
      );
      ok = false;
    } else dockerfile = d;
  }
  const target = raw.target === undefined ? null : typeof raw.target === "string" ? raw.target : undefined;
  if (target === undefined) {
    issues.error("invalid_value", [...path, "target"], "build.target must be a stage's name");
    ok = false;
  }
  const cacheFrom = raw.cache_from === undefined ? [] : raw.cache_from;
  if (!Array.isArray(cacheFrom) || cacheFrom.some((c) => typeof c !== "string")) {
    issues.error("invalid_value", [...path, "cache_from"], "build.cache_from is a list of image references");
    ok = false;
  }
  if (raw.no_cache !== undefined && typeof raw.no_cache !== "boolean") {
    issues.error("invalid_value", [...path, "no_cache"], "build.no_cache is true or false");
    ok = false;
  }
  const network = raw.network === undefined ? null : raw.network;
  if (network !== null && network !== "default" && network !== "none") {
    issues.error(
      network === "host" ? "network_mode_host" : "invalid_value",
      [...path, "network"],
      network === "host"
        ? "build.network host would run build steps in the host's network; use default or none"
        : "build.network is default or none (build steps cannot join the stack's networks)",
    );
    ok = false;
  }
  const args = stringMap(raw.args, [...path, "args"], issues, "build arg");
  const labels = stringMap(raw.labels, [...path, "labels"], issues, "build label");
  if (!ok || typeof context !== "string" || target === undefined) return null;
  return {
    context,
    dockerfile,
    args,
    target,
    cache_from: cacheFrom as string[],
    no_cache: raw.no_cache === true,
    labels,
    network: network === "none" ? "none" : "default",
    context_digest: null,
  };
}
