/** The `x-denv` block: denv's settings beside the compose file, validated strictly (unknown keys refused). */

import { KINDS } from "@denv/protocol";
import { z } from "zod";

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
  egress: z.enum(["deny", "allow"]).optional(),
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
