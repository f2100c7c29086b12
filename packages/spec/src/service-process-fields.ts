/**
 * A compose service's process fields: command and entrypoint, environment (env_file included),
 * capabilities, healthcheck, depends_on and secrets, each in every syntax Compose accepts and each
 * refusal with its reason.
 */
import { posix } from "node:path";
import { DEFAULT_CAPS, DEFAULT_HEALTHCHECK, type ResolvedService } from "@denv/protocol";
import { parseDotenv } from "./interpolate.ts";
import type { FieldPath } from "./issues.ts";
import type { IssueList } from "./load-compose.ts";
import { bytes, duration, isRecord, type ServiceContext, scalarString } from "./service-fields.ts";
import { splitShellWords } from "./shell-words.ts";
import { parseCpus } from "./units.ts";

export function commandField(v: unknown, path: FieldPath, issues: IssueList): string[] | null {
  if (v === undefined || v === null) return null;
  if (typeof v === "string") {
    const words = splitShellWords(v);
    if (!words) {
      issues.error("invalid_value", path, "unterminated quote in the command; close it or use the list form");
      return null;
    }
    return words;
  }
  if (Array.isArray(v) && v.every((x) => scalarString(x) !== undefined))
    return v.map((x) => scalarString(x) as string);
  issues.error("invalid_value", path, "a command is a string or a list of strings");
  return null;
}

export function keyValueField(
  v: unknown,
  path: FieldPath,
  issues: IssueList,
  what: string,
): Record<string, string> {
  const out: Record<string, string> = {};
  if (v === undefined || v === null) return out;
  if (Array.isArray(v)) {
    v.forEach((item, i) => {
      const s = scalarString(item);
      if (s === undefined) {
        issues.error("invalid_value", [...path, i], `${what} entries are "key=value" strings`);
        return;
      }
      const eq = s.indexOf("=");
      out[eq === -1 ? s : s.slice(0, eq)] = eq === -1 ? "" : s.slice(eq + 1);
    });
  } else if (isRecord(v)) {
    for (const [k, val] of Object.entries(v))
      out[k] = val === null ? "" : (scalarString(val) ?? JSON.stringify(val));
  } else {
    issues.error("invalid_value", path, `${what} is a list of "key=value" or a mapping`);
  }
  return out;
}

export function environmentField(
  svc: Record<string, unknown>,
  at: (...p: (string | number)[]) => FieldPath,
  ctx: ServiceContext,
): Record<string, string> {
  const out: Record<string, string> = {};
  // env_file first: environment: overrides it, as in Compose.
  if (svc.env_file !== undefined) {
    const entries = Array.isArray(svc.env_file) ? svc.env_file : [svc.env_file];
    entries.forEach((entry, i) => {
      const path = typeof entry === "string" ? entry : isRecord(entry) ? entry.path : undefined;
      const required = isRecord(entry) ? entry.required !== false : true;
      if (typeof path !== "string") {
        ctx.issues.error("invalid_value", at("env_file", i), "env_file entries are paths");
        return;
      }
      if (path.startsWith("/") || path.split("/").includes("..")) {
        ctx.issues.error(
          "bind_mount",
          at("env_file", i),
          "env_file must be a path inside the project directory",
        );
        return;
      }
      const text = ctx.readFile?.(path);
      if (text === undefined) {
        if (required) ctx.issues.error("invalid_value", at("env_file", i), `env_file ${path} was not found`);
        return;
      }
      Object.assign(out, parseDotenv(text));
    });
  }
  const env = svc.environment;
  if (env === undefined || env === null) return out;
  const take = (key: string, value: unknown, path: FieldPath) => {
    if (value === null || value === undefined) {
      // A bare name takes its value from the environment denv runs in; unset means omitted.
      const fromEnv = ctx.env[key];
      if (fromEnv !== undefined) out[key] = fromEnv;
      return;
    }
    const s = scalarString(value);
    if (s === undefined)
      ctx.issues.error("invalid_value", path, `environment ${key} must be a string, number or boolean`);
    else out[key] = s;
  };
  if (Array.isArray(env)) {
    env.forEach((item, i) => {
      const s = scalarString(item);
      if (s === undefined) {
        ctx.issues.error("invalid_value", at("environment", i), `entries are "KEY=value"`);
        return;
      }
      const eq = s.indexOf("=");
      take(eq === -1 ? s : s.slice(0, eq), eq === -1 ? null : s.slice(eq + 1), at("environment", i));
    });
  } else if (isRecord(env)) {
    for (const [k, v] of Object.entries(env)) take(k, v, at("environment", k));
  } else {
    ctx.issues.error("invalid_value", at("environment"), 'environment is a list of "KEY=value" or a mapping');
  }
  return out;
}

export function capsField(
  svc: Record<string, unknown>,
  at: (...p: (string | number)[]) => FieldPath,
  issues: IssueList,
): ResolvedService["caps"] {
  const limits =
    isRecord(svc.deploy) && isRecord(svc.deploy.resources) && isRecord(svc.deploy.resources.limits)
      ? svc.deploy.resources.limits
      : {};
  if (isRecord(svc.deploy)) {
    for (const key of Object.keys(svc.deploy)) {
      if (key === "resources" || key === "replicas") continue;
      issues.warn(
        "ignored_field",
        at("deploy", key),
        `deploy.${key} is accepted and ignored: it is for swarm orchestration`,
      );
    }
    if (isRecord(svc.deploy.resources)) {
      for (const key of Object.keys(svc.deploy.resources)) {
        if (key === "reservations" && isRecord(svc.deploy.resources.reservations)) {
          // Devices (GPUs) are reserved for real (gpu-request.ts); memory and CPU reservations are not.
          for (const r of Object.keys(svc.deploy.resources.reservations))
            if (r !== "devices")
              issues.warn(
                "ignored_field",
                at("deploy", "resources", "reservations", r),
                `deploy.resources.reservations.${r} is accepted and ignored: only limits cap a service`,
              );
        } else if (key !== "limits")
          issues.warn(
            "ignored_field",
            at("deploy", "resources", key),
            `deploy.resources.${key} is accepted and ignored: only limits cap a service`,
          );
      }
    }
    for (const key of Object.keys(limits)) {
      if (!["memory", "cpus", "pids"].includes(key))
        issues.error(
          "unsupported_field",
          at("deploy", "resources", "limits", key),
          `deploy.resources.limits.${key} is not a limit denv renders`,
        );
    }
  }
  const pick = <T>(
    field: string,
    limitField: string,
    parse: (v: unknown, p: FieldPath) => T | undefined,
    fallback: T,
  ): T => {
    const a = svc[field] === undefined ? undefined : parse(svc[field], at(field));
    const b =
      limits[limitField] === undefined
        ? undefined
        : parse(limits[limitField], at("deploy", "resources", "limits", limitField));
    if (a !== undefined && b !== undefined && a !== b) {
      issues.error(
        "conflicting_values",
        at(field),
        `${field} and deploy.resources.limits.${limitField} disagree (${String(a)} vs ${String(b)}); keep one`,
      );
    }
    return a ?? b ?? fallback;
  };
  return {
    memory_bytes: pick("mem_limit", "memory", (v, p) => bytes(v, p, issues), DEFAULT_CAPS.memory_bytes),
    pids: pick(
      "pids_limit",
      "pids",
      (v, p) => {
        const n = typeof v === "number" ? v : Number(scalarString(v));
        if (Number.isSafeInteger(n) && n > 0) return n;
        // -1 and 0 mean "unlimited" in Docker; an environment always gets a cap.
        issues.error(
          "invalid_value",
          p,
          `pids_limit "${String(v)}" must be a positive integer (every service is capped)`,
        );
        return undefined;
      },
      DEFAULT_CAPS.pids,
    ),
    cpus: pick(
      "cpus",
      "cpus",
      (v, p) => {
        const n = typeof v === "string" || typeof v === "number" ? parseCpus(v) : undefined;
        if (n === undefined)
          issues.error("invalid_value", p, `cpus "${String(v)}" must be a positive number`);
        return n;
      },
      DEFAULT_CAPS.cpus,
    ),
  };
}

export function healthcheckField(
  v: unknown,
  path: FieldPath,
  issues: IssueList,
): { healthcheck: ResolvedService["healthcheck"]; disabled: boolean } {
  if (v === undefined || v === null) return { healthcheck: null, disabled: false };
  if (!isRecord(v)) {
    issues.error("invalid_value", path, "healthcheck is a mapping with test:, interval:, retries: ...");
    return { healthcheck: null, disabled: false };
  }
  if (v.disable === true) return { healthcheck: null, disabled: true };
  let test: string[] | undefined;
  if (typeof v.test === "string") test = ["CMD-SHELL", v.test];
  else if (Array.isArray(v.test) && v.test.every((x) => typeof x === "string")) {
    const [head, ...rest] = v.test as string[];
    if (head === "NONE") return { healthcheck: null, disabled: true };
    if (head === "CMD" && rest.length > 0) test = ["CMD", ...rest];
    else if (head === "CMD-SHELL" && rest.length === 1) test = ["CMD-SHELL", rest[0] as string];
  }
  if (!test) {
    issues.error(
      "invalid_value",
      [...path, "test"],
      'healthcheck.test is a string, ["CMD", argv...], ["CMD-SHELL", "script"] or ["NONE"]',
    );
    return { healthcheck: null, disabled: false };
  }
  const ms = (key: string, fallback: number) =>
    v[key] === undefined ? fallback : (duration(v[key], [...path, key], issues) ?? fallback);
  let retries = DEFAULT_HEALTHCHECK.retries;
  if (v.retries !== undefined) {
    if (typeof v.retries === "number" && Number.isInteger(v.retries) && v.retries >= 0) retries = v.retries;
    else issues.error("invalid_value", [...path, "retries"], "retries must be a whole number");
  }
  for (const key of Object.keys(v)) {
    if (
      !["test", "interval", "timeout", "start_period", "start_interval", "retries", "disable"].includes(key)
    )
      issues.error(
        "unsupported_field",
        [...path, key],
        `healthcheck.${key} is not a Compose healthcheck field`,
      );
  }
  return {
    healthcheck: {
      test,
      interval_ms: ms("interval", DEFAULT_HEALTHCHECK.interval_ms),
      timeout_ms: ms("timeout", DEFAULT_HEALTHCHECK.timeout_ms),
      start_period_ms: ms("start_period", DEFAULT_HEALTHCHECK.start_period_ms),
      start_interval_ms: v.start_interval === undefined ? null : ms("start_interval", 5000),
      retries,
    },
    disabled: false,
  };
}

export function dependsOnField(
  v: unknown,
  path: FieldPath,
  ctx: ServiceContext,
): ResolvedService["depends_on"] {
  const out: ResolvedService["depends_on"] = {};
  if (v === undefined || v === null) return out;
  const add = (
    name: string,
    p: FieldPath,
    cond: unknown = "service_started",
    required = true,
    restart = false,
  ) => {
    if (!ctx.serviceNames.has(name)) {
      if (required)
        ctx.issues.error("service_unknown", p, `depends_on names service ${name}, which is not in the file`);
      return;
    }
    if (
      cond !== "service_started" &&
      cond !== "service_healthy" &&
      cond !== "service_completed_successfully"
    ) {
      ctx.issues.error(
        "invalid_value",
        p,
        "condition is service_started, service_healthy or service_completed_successfully",
      );
      return;
    }
    out[name] = { condition: cond, required, restart };
  };
  if (Array.isArray(v))
    v.forEach((n, i) => {
      add(scalarString(n) ?? "", [...path, i]);
    });
  else if (isRecord(v)) {
    for (const [name, spec] of Object.entries(v)) {
      const s = isRecord(spec) ? spec : {};
      add(name, [...path, name], s.condition ?? "service_started", s.required !== false, s.restart === true);
    }
  } else ctx.issues.error("invalid_value", path, "depends_on is a list of services or a mapping");
  return out;
}

/**
 * A service's secrets: NAME, or {source, target, uid, gid, mode}, naming a top-level secret. Each
 * is a read-only file at /run/secrets/NAME (a relative target is under /run/secrets), owned by
 * root and readable by all (0444) unless uid, gid and mode say otherwise, as Compose mounts one.
 */
export function secretsField(
  raw: unknown,
  at: (...p: (string | number)[]) => FieldPath,
  ctx: ServiceContext,
): NonNullable<ResolvedService["secrets"]> {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) {
    ctx.issues.error("invalid_value", at("secrets"), "secrets is a list of secret names or mappings");
    return [];
  }
  const out: NonNullable<ResolvedService["secrets"]> = [];
  const id = (v: unknown, p: FieldPath, what: string): number | null => {
    if (v === undefined || v === null) return 0;
    const n = typeof v === "number" ? v : typeof v === "string" && /^\d+$/.test(v) ? Number(v) : Number.NaN;
    if (!Number.isInteger(n) || n < 0 || n > 0x7fffffff) {
      ctx.issues.error("invalid_value", p, `${what} must be a number (a uid or gid)`);
      return null;
    }
    return n;
  };
  raw.forEach((entry, i) => {
    const p = at("secrets", i);
    const e = typeof entry === "string" ? { source: entry } : isRecord(entry) ? entry : null;
    const source = e ? scalarString(e.source) : undefined;
    if (!e || !source) {
      ctx.issues.error("invalid_value", p, "a secret is a name or a mapping with source:");
      return;
    }
    if (!ctx.declaredSecrets?.has(source)) {
      ctx.issues.error(
        "secret_undeclared",
        p,
        `secret ${source} is not declared; add it under the top-level secrets: with file:`,
      );
      return;
    }
    const t = scalarString(e.target) ?? source;
    const target = t.startsWith("/") ? posix.normalize(t) : posix.join("/run/secrets", t);
    if (!target.startsWith("/") || target === "/" || /[\n\r\0]/.test(t) || t.split("/").includes("..")) {
      ctx.issues.error("invalid_value", [...p, "target"], `secret target ${t} must name a file`);
      return;
    }
    const uid = id(e.uid, [...p, "uid"], "uid");
    const gid = id(e.gid, [...p, "gid"], "gid");
    let mode = 0o444;
    if (e.mode !== undefined) {
      // Modes are written in octal (0440); YAML 1.2 reads 0440 as the decimal 440, so a number
      // whose digits are all octal ones is read as octal, as the file meant it.
      const m =
        typeof e.mode === "number"
          ? /^[0-7]{1,4}$/.test(String(e.mode))
            ? Number.parseInt(String(e.mode), 8)
            : e.mode
          : typeof e.mode === "string" && /^0?[0-7]{1,4}$/.test(e.mode)
            ? Number.parseInt(e.mode, 8)
            : Number.NaN;
      if (!Number.isInteger(m) || m < 0 || m > 0o777) {
        ctx.issues.error("invalid_value", [...p, "mode"], "mode is a file mode (0 to 0777)");
        return;
      }
      mode = m;
    }
    if (uid === null || gid === null) return;
    out.push({ name: source, target, uid, gid, mode });
  });
  return out;
}
