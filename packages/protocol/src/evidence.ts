/**
 * The evidence each phase records, as denvd makes it and the control plane stores it. One schema
 * per kind, the types derived from them: denvd builds these objects, the host hub checks them on
 * arrival, and the API serves them. Server and hosts speak one protocol version (the hello says
 * which), so a field either side does not know is dropped, not guessed at.
 */
import { z } from "zod";

const ms = z.number();
const nullableNumber = z.number().nullable();

export const quotaEvidence = z.object({
  /** How the limit is held: "btrfs qgroup", "zfs refquota", or "none" (the dir driver). */
  enforced: z.enum(["btrfs qgroup", "zfs refquota", "none"]),
  /** Bytes the dataset may hold in all (null: unlimited). */
  limit_bytes: nullableNumber,
  reason: z.string().optional(),
});

export const capsEvidence = z.object({
  engine: z.object({ memory_bytes: z.number(), pids: z.number(), cpus: z.number() }),
  cgroup: z.object({
    memory_bytes: nullableNumber,
    pids: nullableNumber,
    cpus: nullableNumber,
    version: z.union([z.literal(1), z.literal(2)]).nullable(),
  }),
  /** The hardening as the kernel holds it for the container's first process (/proc on the host). */
  security: z.object({
    no_new_privileges: z.boolean().nullable(),
    /** Capabilities denv drops that are indeed absent from the process's bounding set. */
    dropped: z.array(z.string()),
    /** The bounding set, as the kernel prints it (hex). */
    cap_bnd: z.string().nullable(),
  }),
});

/** A service's clock, as denvd read it from the host: its program has the clock library or says why not. */
export const clockServiceEvidence = z.object({
  frozen: z.boolean(),
  /** The main program, as the container sees its path; null when it is not running. */
  program: z.string().nullable(),
  linkage: z.enum(["glibc", "musl", "static", "other", "unknown"]),
  reason: z.string().nullable(),
});

/** The stack's wall clock when its services were started (x-denv.clock). */
export const clockEvidence = z.object({
  mode: z.enum(["frozen", "frozen-strict", "real"]),
  /** What the clock read when the stack started (ISO); null for the real clock. */
  base: z.string().nullable(),
  tick_ms: z.number().nullable(),
  /** Held: it reads base until the stack is handed over (a fork's hand-over releases it). */
  held: z.boolean(),
  services: z.record(z.string(), clockServiceEvidence),
  /** Services whose clock is real although the stack's is frozen, with why. */
  warnings: z.array(z.string()),
});

export const serviceStartEvidence = z.object({
  container_id: z.string(),
  image: z.string(),
  caps: capsEvidence,
  /**
   * A service given GPUs: the ones placement gave it (UUIDs; null: rendered from the request
   * as written), how they were passed, and what `nvidia-smi -L` in the container lists (null where
   * the container has no nvidia-smi).
   */
  gpus: z
    .object({
      assigned: z.array(z.string()).nullable(),
      mode: z.enum(["cdi", "nvidia", "none"]),
      seen: z.array(z.string()).nullable(),
    })
    .optional(),
});

export const healthEvidence = z.object({
  /** Per service: ms from start to healthy, how it was judged, and how many checks ran. */
  services: z.record(
    z.string(),
    z.object({
      healthy_ms: ms,
      method: z.enum(["healthcheck", "running"]),
      checks: z.number(),
      /**
       * A deploy's service without a healthcheck: up because it sat idle waiting (no CPU for
       * 100 ms, its process asleep on something other than a child), or because it stayed
       * running through the whole settle window (1 s).
       */
      settled: z.enum(["idle", "window"]).optional(),
    }),
  ),
  ms,
});

export const warmEvidence = z.object({
  commands: z.array(
    z.object({
      service: z.string(),
      command: z.array(z.string()),
      exit_code: z.number(),
      ms,
      stdout_tail: z.string(),
      stderr_tail: z.string(),
    }),
  ),
});

export const snapshotEvidence = z.object({
  version_id: z.string(),
  frozen_ms: ms,
  checkpoint: z.array(
    z.object({ service: z.string(), command: z.array(z.string()), exit_code: z.number(), ms }),
  ),
  datasets: z.record(
    z.string(),
    z.object({ dataset_id: z.string(), snapshot_id: z.string(), bytes: z.number() }),
  ),
  health_after_ms: ms,
  /** What the stack's clock read in the frozen window: the time a fork of the version starts at. */
  clock: z.object({ mode: z.enum(["frozen", "frozen-strict", "real"]), at: z.string() }).optional(),
  /**
   * Services that wrote files outside their volumes (their containers' own layers): those files are
   * not in the version, so its forks do not have them. How many paths, and a few of them.
   */
  outside_volumes: z
    .record(z.string(), z.object({ paths: z.number(), examples: z.array(z.string()) }))
    .optional(),
  /**
   * A live version's processes: each service's checkpoint (CRIU's images) and container layer
   * taken in the frozen window, and the services kept disk-only (best-effort) with why.
   */
  live: z
    .object({
      services: z.record(
        z.string(),
        z.object({
          checkpoint_bytes: z.number(),
          layer_bytes: z.number(),
          dump_ms: ms,
          /** sha256 of the images and the layer, checked before every restore. */
          digest: z.string().optional(),
        }),
      ),
      skipped: z.record(z.string(), z.string()),
    })
    .optional(),
});

/**
 * What a connect saw: connected or refused (something answered: reachable); no_route (the
 * namespace's routes lead nowhere: blocked at once), unreachable (the kernel answered that no host
 * or network is there) or timeout (silence for the whole wait).
 */
type Outcome = "connected" | "refused" | "timeout" | "unreachable" | "no_route";
const outcome = z.enum(["connected", "refused", "timeout", "unreachable", "no_route"]) as z.ZodType<Outcome>;

export const egress6Evidence = z.object({
  result: z.enum(["blocked", "reachable"]),
  /** The link-local target, or "none" when the bridge has no IPv6 address to aim at. */
  target: z.string(),
  outcome,
  /**
   * net.ipv6.conf.all.disable_ipv6 in the namespace; where the namespace was read from the host
   * (`interfaces` is lo alone), whether it holds no IPv6 address at all, loopback's included.
   */
  disabled: z.boolean(),
  /** IPv6 addresses on the namespace's interfaces other than loopback. */
  addresses: z.number(),
});

export const egressEvidence = z.object({
  /** blocked only when IPv4 and IPv6 both are. */
  result: z.enum(["blocked", "reachable"]),
  target: z.string(),
  /** What the connect saw: connected, refused (something answered), or the error that blocked it. */
  outcome,
  ms,
  /** The service whose network namespace the probe ran in. */
  from: z.string().optional(),
  /** How long a connect to the namespace's own address took (the local round trip), in µs. */
  control_us: z.number().optional(),
  /** How long silence from the target had to last to count as blocked, in ms. */
  wait_ms: z.number().optional(),
  /** The namespace's route to the target, as the kernel answered (`ip route get`). */
  route: z.string().max(500).optional(),
  /**
   * Set when the namespace was read from the host instead of probed: its interfaces, which were lo
   * alone (no device for a packet to leave by), from /proc/PID/net/dev.
   */
  interfaces: z.array(z.string()).max(64).optional(),
  /** IPv4 addresses this host holds on the probed network's bridge (a deny network: 0). */
  host_addresses_on_bridge: z.number().optional(),
  ipv6: egress6Evidence.optional(),
});

/** One connection through an environment's egress proxy, as its egress log keeps it (docs/egress.md). */
export const egressRecord = z.object({
  at: z.string(),
  /** The service that made it (by its address); null when none holds that address. */
  service: z.string().nullable(),
  client: z.string(),
  kind: z.enum(["http", "connect"]),
  /** host:port as the caller asked. */
  destination: z.string(),
  /** The address connected to (the proxy's own resolution); null when refused before one. */
  address: z.string().nullable(),
  allowed: z.boolean(),
  rule: z.string().nullable(),
  reason: z.string(),
  /** What went wrong after the decision (no answer, a limit, closed by a policy change). */
  error: z.string().optional(),
  bytes_out: z.number().int().nonnegative(),
  bytes_in: z.number().int().nonnegative(),
  ms: z.number().nonnegative(),
});
export type EgressRecord = z.infer<typeof egressRecord>;

/** An egress policy as kept and changed: rules (docs/egress.md has their grammar). */
export const egressPolicySchema = z.object({
  allow: z.array(z.string().max(300)).max(256),
  deny: z.array(z.string().max(300)).max(256),
});

export const prepareEvidence = z.object({
  images: z.record(z.string(), z.object({ reference: z.string(), pulled: z.boolean() })),
  /** Volume name → dataset id. */
  datasets: z.record(z.string(), z.string()),
  quota: z.record(z.string(), quotaEvidence),
  /**
   * A deploy onto a version's data (a pull request's preview onto alpha's): the version, and the
   * volumes cloned from its snapshots (the others start empty).
   */
  data_from: z.object({ version_id: z.string(), cloned: z.array(z.string()) }).optional(),
});

export const forkEvidence = z.object({
  stack_id: z.string(),
  from_version: z.string(),
  clone_ms: ms,
  /** Each dataset's growth limit (what it may hold in all), as the storage driver enforces it. */
  quota: z.record(z.string(), quotaEvidence),
  start: z.record(z.string(), serviceStartEvidence),
  start_ms: ms,
  health: healthEvidence,
  egress: egressEvidence,
  /** Absent from hosts before the frozen clock. */
  clock: clockEvidence.optional(),
  /**
   * A fork of a live version: the services restored from their processes, and those started
   * afresh (kept disk-only, or all of them with cold), with why.
   */
  live: z.object({ restored: z.array(z.string()), started: z.record(z.string(), z.string()) }).optional(),
  total_ms: ms,
});

/** A pause that keeps memory: each service's checkpoint (its processes stopped, memory on disk). */
export const pauseEvidence = z.object({
  services: z.record(z.string(), z.object({ checkpoint_bytes: z.number(), dump_ms: ms })),
  ms,
});

export const collectEvidence = z.object({
  refused: z.string().nullable(),
  /** The first files collected, with their digests. */
  files: z.array(z.object({ path: z.string(), bytes: z.number(), sha256: z.string() })),
  /** Every file collected. */
  file_count: z.number(),
  missing: z.array(z.string()),
  bytes: z.number(),
});

export const gradeEvidence = z.object({
  reward: z.number(),
  reason: z.string().nullable(),
  exit_code: z.number().nullable(),
  timed_out: z.boolean(),
  stdout_tail: z.string(),
  stderr_tail: z.string(),
  ms,
  mode: z.enum(["image", "service"]),
});

export type QuotaEvidence = z.infer<typeof quotaEvidence>;
export type CapsEvidence = z.infer<typeof capsEvidence>;
export type ServiceStartEvidence = z.infer<typeof serviceStartEvidence>;
export type ClockServiceEvidence = z.infer<typeof clockServiceEvidence>;
export type ClockEvidence = z.infer<typeof clockEvidence>;
export type HealthEvidence = z.infer<typeof healthEvidence>;
export type WarmEvidence = z.infer<typeof warmEvidence>;
export type SnapshotEvidence = z.infer<typeof snapshotEvidence>;
export type Egress6Evidence = z.infer<typeof egress6Evidence>;
export type EgressEvidence = z.infer<typeof egressEvidence>;
export type PrepareEvidence = z.infer<typeof prepareEvidence>;
export type ForkEvidence = z.infer<typeof forkEvidence>;
export type CollectEvidence = z.infer<typeof collectEvidence>;
export type GradeEvidence = z.infer<typeof gradeEvidence>;
