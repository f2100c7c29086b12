/** The `x-denv` block: denv's settings beside the compose file, validated strictly (unknown keys refused). */

import { KINDS } from "@denv/protocol";
import { z } from "zod";
import { closestName } from "./closest-name.ts";

/** A command: a shell string (run with `sh -c`) or an argv list. */
const commandSchema = z.union([
  z.string().min(1, "a command cannot be empty"),
  z.array(z.string()).min(1, "a command list needs at least one element"),
]);

const warmItemSchema = z.union([
  z.string().min(1, "a warm command cannot be empty"),
  z.strictObject({ service: z.string().min(1), command: commandSchema }),
]);

export const xDenvSchema = z.strictObject({
  kind: z.enum(KINDS).optional(),
  /**
   * deny (no way out), allow (the engine's own), or a policy: the destinations reachable through
   * the environment's egress proxy (egress-policy.ts has the rules' grammar).
   */
  egress: z
    .union(
      [
        z.enum(["deny", "allow"]),
        z.strictObject({
          allow: z.array(z.string()).max(256, "at most 256 allow rules"),
          deny: z.array(z.string()).max(256, "at most 256 deny rules").optional(),
        }),
      ],
      { error: "is deny, allow, or a policy {allow: [rules], deny: [rules]} (docs/egress.md)" },
    )
    .optional(),
  warm: z.union([warmItemSchema, z.array(warmItemSchema)]).optional(),
  agent: z.strictObject({ service: z.string().min(1) }).optional(),
  verifier: z
    .strictObject({
      image: z.string().min(1).optional(),
      service: z.string().min(1).optional(),
      command: commandSchema.optional(),
      collect: z.array(z.string().min(1)).optional(),
      timeout: z.union([z.string(), z.number().nonnegative()]).optional(),
    })
    .optional(),
  clock: z.enum(["frozen", "frozen-strict", "real"]).optional(),
  /**
   * Ready forks of the project's production version kept warm: a number, or {size, environment}
   * (the production environment the pool follows; default alpha). Deploys of other environments,
   * and every branch and pull request deploy, leave the pool as it is.
   */
  pool: z
    .union([
      z.number().int().min(0).max(256),
      z.strictObject({
        size: z.number().int().min(0).max(256),
        environment: z
          .string()
          .regex(/^[a-z0-9][a-z0-9_-]{0,62}$/, "an environment's name (lowercase letters, digits, _ and -)")
          .optional(),
      }),
    ])
    .optional(),
  checkpoint: z.record(z.string(), z.union([commandSchema, z.array(commandSchema).min(1)])).optional(),
  /** Copies of each version kept on distinct hosts (the one it was taken on counts): 1 to 16. */
  replicas: z.number().int().min(1).max(16).optional(),
  /**
   * The deploy's version keeps every service's processes (a CRIU checkpoint) beside its volumes,
   * and its forks continue from them; best-effort keeps disk-only what CRIU cannot take.
   */
  live: z.union([z.boolean(), z.literal("best-effort")]).optional(),
  /**
   * Seconds with no request reaching an environment (exec, files, logs, a port URL) after which it
   * is paused with its memory; the next such request resumes it. 60 s to a week.
   */
  idle_pause_s: z.number().int().min(60).max(604_800).optional(),
  /**
   * Branches whose pushes deploy an environment named after the branch (GitHub sources): names or
   * patterns where `*` is any run of characters but `/` and `**` any run at all.
   */
  branches: z
    .array(
      z
        .string()
        .min(1)
        .max(255)
        .regex(/^[A-Za-z0-9._/*-]+$/, "a branch name or pattern (letters, digits, . _ - / *)"),
    )
    .max(64)
    .optional(),
  /** Ingress names: which services' published ports answer without the environment's token. */
  ingress: z
    .strictObject({
      public: z.array(z.string().min(1)).max(64).optional(),
    })
    .optional(),
  /** Where the project's environments run: a connected cloud or target by name (a host's name too). */
  target: z
    .string()
    .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$/, "a target's name is 1-63 letters, digits, '.', '_' or '-'")
    .optional(),
});

export type XDenv = z.infer<typeof xDenvSchema>;

/**
 * The keys the object at `path` in a schema takes (for a did-you-mean on a key it refused): through
 * optional wrappers, unions (the object options), lists and records; none where no object is there.
 */
export function objectKeysAt(schema: z.ZodType, path: readonly (string | number)[]): string[] {
  const objects = (s: z.ZodType): z.ZodObject[] => {
    if (s instanceof z.ZodObject) return [s];
    if (s instanceof z.ZodOptional || s instanceof z.ZodNullable) return objects(s.unwrap() as z.ZodType);
    if (s instanceof z.ZodUnion) return (s.options as z.ZodType[]).flatMap(objects);
    return [];
  };
  const step = (s: z.ZodType, key: string | number): z.ZodType[] => {
    if (s instanceof z.ZodOptional || s instanceof z.ZodNullable) return step(s.unwrap() as z.ZodType, key);
    if (s instanceof z.ZodUnion) return (s.options as z.ZodType[]).flatMap((o) => step(o, key));
    if (s instanceof z.ZodArray && typeof key === "number") return [s.element as z.ZodType];
    if (s instanceof z.ZodRecord) return [s.valueType as z.ZodType];
    if (s instanceof z.ZodObject && typeof key === "string" && key in s.shape)
      return [s.shape[key] as z.ZodType];
    return [];
  };
  let at: z.ZodType[] = [schema];
  for (const key of path) at = at.flatMap((s) => step(s, key));
  return [...new Set(at.flatMap(objects).flatMap((o) => Object.keys(o.shape)))];
}

/**
 * The x-denv block's refusals as a person reads them: each unknown key at its own path, with the
 * key its block takes that was likely meant; a missing one as required (unless a misspelling of it
 * was just named); the rest as zod says, each under its path.
 */
export function describeXDenvIssues(
  issues: readonly z.core.$ZodIssue[],
): { path: (string | number)[]; message: string }[] {
  const pathOf = (issue: z.core.$ZodIssue) => issue.path.map((p) => (typeof p === "symbol" ? String(p) : p));
  const where = (path: (string | number)[]) => ["x-denv", ...path].join(".");
  // A required key misspelt is said once, as the misspelling, not again as missing.
  const meant = new Set<string>();
  for (const issue of issues)
    if (issue.code === "unrecognized_keys")
      for (const key of issue.keys) {
        const m = closestName(key, objectKeysAt(xDenvSchema, pathOf(issue)));
        if (m) meant.add(where([...pathOf(issue), m]));
      }
  const out: { path: (string | number)[]; message: string }[] = [];
  for (const issue of issues) {
    const path = pathOf(issue);
    if (issue.code === "unrecognized_keys") {
      const known = objectKeysAt(xDenvSchema, path);
      for (const key of issue.keys) {
        const m = closestName(key, known);
        const hint = m ? `; did you mean "${m}"?` : known.length ? ` (it takes ${known.join(", ")})` : "";
        out.push({ path: [...path, key], message: `${where(path)} has no key "${key}"${hint}` });
      }
    } else if (issue.code === "invalid_type" && /received undefined$/.test(issue.message)) {
      if (!meant.has(where(path)))
        out.push({ path, message: `${where(path)} is required (${issue.expected})` });
    } else out.push({ path, message: `${where(path)}: ${issue.message}` });
  }
  return out;
}
