/**
 * The resolved form: what later phases (place, prepare, start, health, warm, snapshot, verify)
 * need, with every default applied and every unit normalised. Serialised as canonical JSON (keys
 * sorted) with snake_case keys; its content hash identifies it. This schema is the boundary type
 * between spec, server and denvd.
 */
import { z } from "zod";

/** A project's kind, as the seed names them. */
export const KINDS = ["rl-environment", "agent", "service", "website", "inference"] as const;
export type Kind = (typeof KINDS)[number];

export const DEFAULT_CAPS = { memory_bytes: 4 * 1024 ** 3, pids: 2048, cpus: 2 } as const;
export const DEFAULT_VERIFIER_TIMEOUT_MS = 600_000;
export const DEFAULT_STOP_GRACE_PERIOD_MS = 10_000;
/** Compose's healthcheck defaults (Docker's): 30 s interval and timeout, 3 retries. */
export const DEFAULT_HEALTHCHECK = {
  interval_ms: 30_000,
  timeout_ms: 30_000,
  start_period_ms: 0,
  retries: 3,
};
/** The default network every service joins when it names none, as in Compose. */
export const DEFAULT_NETWORK = "default";

const argv = z.array(z.string());

export const capsSchema = z.object({
  memory_bytes: z.number().int().positive(),
  pids: z.number().int().positive(),
  cpus: z.number().positive(),
});

export const healthcheckSchema = z.object({
  /** ["CMD", ...argv] or ["CMD-SHELL", script]. */
  test: argv,
  interval_ms: z.number().int().nonnegative(),
  timeout_ms: z.number().int().nonnegative(),
  start_period_ms: z.number().int().nonnegative(),
  start_interval_ms: z.number().int().nonnegative().nullable(),
  retries: z.number().int().nonnegative(),
});

export const serviceSchema = z.object({
  image: z.string(),
  /** sha256:… once the resolve phase pinned it; null from `validate`, which does not pin. */
  image_digest: z.string().nullable(),
  /** Reference to pull by digest (repo@sha256:…), or the image ID for engine-only images; null until pinned. */
  image_pinned: z.string().nullable(),
  /** Built on the target's engine in prepare; image_pinned is then the built image's id. */
  build: z
    .object({
      /** The context directory, relative to the compose file (never outside the project). */
      context: z.string(),
      /** Relative to the context. */
      dockerfile: z.string(),
      args: z.record(z.string(), z.string()),
      target: z.string().nullable(),
      cache_from: z.array(z.string()),
      no_cache: z.boolean(),
      labels: z.record(z.string(), z.string()),
      network: z.enum(["default", "none"]),
      /** sha256 of the context's tar as uploaded (or archived from git); null from `validate`. */
      context_digest: z.string().nullable(),
    })
    .nullable(),
  entrypoint: argv.nullable(),
  command: argv.nullable(),
  environment: z.record(z.string(), z.string()),
  user: z.string().nullable(),
  working_dir: z.string().nullable(),
  hostname: z.string().nullable(),
  caps: capsSchema,
  /**
   * The GPUs it asks for (Compose's `gpus:` or deploy.resources.reservations.devices, resolved to
   * one request): a count (`all`: every GPU of its host) or the host's device ids. Absent: none.
   */
  gpus: z
    .object({
      driver: z.string(),
      count: z.union([z.number().int().positive(), z.literal("all")]).nullable(),
      device_ids: z.array(z.string()).nullable(),
      capabilities: z.array(z.string()),
      options: z.record(z.string(), z.string()),
    })
    .optional(),
  /** null: none declared (the image's own, if any, applies). */
  healthcheck: healthcheckSchema.nullable(),
  healthcheck_disabled: z.boolean(),
  depends_on: z.record(
    z.string(),
    z.object({
      condition: z.enum(["service_started", "service_healthy", "service_completed_successfully"]),
      required: z.boolean(),
      restart: z.boolean(),
    }),
  ),
  volumes: z.array(
    z.object({
      dataset: z.string(),
      target: z.string(),
      read_only: z.boolean(),
      subpath: z.string().nullable(),
      nocopy: z.boolean(),
    }),
  ),
  /**
   * File secrets the service gets, each a read-only file at `target` (/run/secrets/NAME unless the
   * file says), owned and moded as given. Absent when it has none (so such a file hashes as before).
   */
  secrets: z
    .array(
      z.object({
        name: z.string(),
        target: z.string(),
        uid: z.number().int().nonnegative(),
        gid: z.number().int().nonnegative(),
        mode: z.number().int().min(0).max(0o777),
      }),
    )
    .optional(),
  tmpfs: z.array(
    z.object({ target: z.string(), size_bytes: z.number().nullable(), mode: z.number().nullable() }),
  ),
  ports: z.array(
    z.object({
      target: z.number().int(),
      published: z.string().nullable(),
      host_ip: z.string().nullable(),
      protocol: z.string(),
    }),
  ),
  expose: z.array(z.string()),
  networks: z.record(z.string(), z.object({ aliases: z.array(z.string()) })),
  /** pid and ipc namespaces: null (the engine's default), "private", "shareable", or "service:NAME". */
  pid_mode: z.string().nullable(),
  ipc_mode: z.string().nullable(),
  /** Set only for network_mode "none" (no network at all) or "service:NAME" (share a stack service's). */
  network_mode: z.string().nullable(),
  labels: z.record(z.string(), z.string()),
  restart: z.string(),
  stop_grace_period_ms: z.number().int().nonnegative(),
  stop_signal: z.string().nullable(),
  init: z.boolean(),
  read_only: z.boolean(),
  tty: z.boolean(),
  stdin_open: z.boolean(),
  cap_drop: z.array(z.string()),
  /**
   * Capabilities given back from those denv drops beyond the engine's defaults (NET_RAW, MKNOD,
   * SYS_CHROOT, SETFCAP, AUDIT_WRITE); absent when none (so older specs keep their hashes).
   */
  cap_add: z.array(z.string()).optional(),
  extra_hosts: z.array(z.string()),
  ulimits: z.record(z.string(), z.object({ soft: z.number(), hard: z.number() })),
  shm_size_bytes: z.number().nullable(),
  sysctls: z.record(z.string(), z.string()),
});

export const resolvedSpecSchema = z.object({
  schema_version: z.literal(1),
  /**
   * The file secrets' contents, read from the project's files at resolve. The spec is stored sealed
   * like the .env's values it holds; the API and the evidence never show these. Absent when none.
   */
  secret_files: z.record(z.string(), z.object({ content_b64: z.string(), sha256: z.string() })).optional(),
  name: z.string().nullable(),
  kind: z.enum(KINDS),
  egress: z.enum(["deny", "allow"]),
  /**
   * x-denv.egress as a policy: the network is deny's (no route out) and the environment's egress
   * proxy is the only way out, to what these rules allow (normalised; @denv/spec's egress-policy.ts).
   * Absent for deny and allow, so a file without one resolves, and hashes, as before.
   */
  egress_policy: z.object({ allow: z.array(z.string()), deny: z.array(z.string()) }).optional(),
  clock: z.enum(["frozen", "frozen-strict", "real"]),
  /**
   * x-denv.pool: ready forks of the latest version the control plane keeps warm. Absent when the
   * file does not declare one (so a file without it resolves, and hashes, as before).
   */
  pool: z.number().int().min(0).max(256).optional(),
  /** x-denv.pool.environment: the production environment the pool follows; absent: alpha. */
  pool_environment: z.string().optional(),
  /**
   * x-denv.replicas: copies of each version the control plane keeps on distinct hosts (the one it
   * was taken on included). Absent when the file does not declare it.
   */
  replicas: z.number().int().min(1).max(16).optional(),
  /** x-denv.live: the deploy's snapshot keeps every service's processes (best-effort: those it can). */
  live: z.enum(["on", "best-effort"]).optional(),
  /** x-denv.idle_pause_s: idle seconds after which an environment of it pauses with its memory. */
  idle_pause_s: z.number().int().positive().optional(),
  /** x-denv.branches: branch patterns whose pushes deploy environments named after them. */
  branches: z.array(z.string()).max(64).optional(),
  /**
   * x-denv.target: the cloud or target the file asks its environments to run on (a project's own
   * pin, `denv project create --target`, wins). Absent when the file names none.
   */
  target: z.string().optional(),
  /**
   * x-denv.ingress.public: the services whose published ports are reachable by name without the
   * environment's ingress token. Absent when the file names none (every name is private).
   */
  ingress: z.object({ public: z.array(z.string()) }).optional(),
  agent: z.object({ service: z.string() }).nullable(),
  warm: z.array(z.object({ service: z.string(), command: argv })),
  verifier: z
    .object({
      image: z.string().nullable(),
      image_digest: z.string().nullable(),
      image_pinned: z.string().nullable(),
      service: z.string().nullable(),
      command: argv.nullable(),
      collect: z.array(z.string()),
      timeout_ms: z.number().int().positive(),
    })
    .nullable(),
  checkpoint: z.record(z.string(), z.array(argv)),
  services: z.record(z.string(), serviceSchema),
  datasets: z.record(
    z.string(),
    z.object({
      labels: z.record(z.string(), z.string()),
      /**
       * A dataset seeded with the project's own files (a relative bind mount): `source` is the path
       * in the project; at resolve the control plane adds what it is and the sha256 of its tar,
       * which the host extracts into the fresh dataset at prepare. A file is mounted alone, by its
       * name inside the dataset. Absent on other datasets (so their specs hash as before).
       */
      seed: z
        .object({
          source: z.string(),
          type: z.enum(["file", "directory"]).optional(),
          digest: z.string().optional(),
        })
        .optional(),
    }),
  ),
  networks: z.record(z.string(), z.object({ internal: z.boolean() })),
  /** Services in an order that satisfies depends_on (dependencies first). */
  start_order: z.array(z.string()),
  /** sha256 of the canonical JSON of everything above. */
  hash: z.string(),
});

export type ResolvedSpec = z.infer<typeof resolvedSpecSchema>;
export type ResolvedService = z.infer<typeof serviceSchema>;
export type Caps = z.infer<typeof capsSchema>;
export type Healthcheck = z.infer<typeof healthcheckSchema>;
