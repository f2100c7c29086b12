/**
 * The /v1 API's request and response schemas (zod). Each route names the ones it takes and gives
 * (see api-route.ts); the OpenAPI document is generated from them. JSON on the wire is snake_case.
 */
import {
  ERROR_CODES,
  type ErrorCode,
  gpuInventorySchema,
  KINDS,
  MAX_COMMAND_TIMEOUT_MS,
  nameSchema,
} from "@denv/protocol";
import { z } from "zod";

/** Every error's stable code (protocol's error table); the document maps each to its HTTP status. */
export const errorCode = z.enum(Object.keys(ERROR_CODES) as [ErrorCode, ...ErrorCode[]]);

export const errorSchema = z.object({
  error: z.object({ code: errorCode, message: z.string(), details: z.unknown().optional() }),
});

/**
 * A yes-or-no query parameter, the one form every route takes: `true` or `false`, anything else
 * refused by name (each route says what its absence means).
 */
export const queryFlag = z.enum(["true", "false"]).optional();

// Project and environment names: the one rule every name a team gives follows (protocol/names.ts).
const name = nameSchema;

export const createTeamBody = z.strictObject({ name: z.string().min(1).max(100) });
export const teamCreated = z.object({ team_id: z.string(), name: z.string(), api_key: z.string() });

export const joinTokenCreated = z.object({ token: z.string(), expires_at: z.string() });
export const hostJoinBody = z.strictObject({
  token: z.string().min(1),
  name: z.string().min(1).max(100).optional(),
});
export const hostJoined = z.object({ host_id: z.string(), secret: z.string() });

export const hostSchema = z.object({
  id: z.string(),
  name: z.string(),
  arch: z.string().nullable(),
  storage: z.string().nullable(),
  capacity: z.unknown(),
  /** Its GPUs and how its engine passes them (mode none: it cannot); null: the host did not say. */
  gpus: gpuInventorySchema.nullable(),
  version: z.string().nullable(),
  last_seen: z.string().nullable(),
  connected: z.boolean(),
  /** Drained (`denv host drain`): it takes no new environment, replica or pool member. */
  draining: z.boolean(),
  /** The team's versions whose data this host holds, newest first. */
  versions: z.array(z.string()),
  /** Warm pools of those versions: each its size and the members ready now. */
  pools: z.array(z.object({ version_id: z.string(), size: z.number().int(), ready: z.number().int() })),
  /** Environments running or starting here (pool members not counted). */
  environments: z.number().int(),
});

/** Branch names or patterns (`*` within a path segment, `**` across) whose pushes deploy. */
export const branchPatterns = z
  .array(
    z
      .string()
      .min(1)
      .max(255)
      .regex(/^[A-Za-z0-9._/*-]+$/, "a branch name or pattern (letters, digits, . _ - / *)"),
  )
  .max(64);

export const createProjectBody = z.strictObject({
  name,
  kind: z.enum(KINDS),
  /** A local directory (the CLI uploads it), any git URL, or github:OWNER/REPO[@BRANCH][#PATH]. */
  source: z.string().min(1).max(1024),
  pinned_target: z.string().optional(),
  /** A github: source's branches that deploy environments named after them (x-denv.branches otherwise). */
  branches: branchPatterns.optional(),
});

/** How many previews a project keeps at once, and what a fork's pull request gets. */
export const setPreviewsBody = z.strictObject({
  budget: z.number().int().min(0).max(64).optional().describe("Previews kept at once (0: none)"),
  forks: z
    .enum(["approve", "deploy", "off"])
    .optional()
    .describe("A fork's pull request: wait for a member's approval (the default), deploy, or none"),
});

export const previewsSchema = z.object({
  budget: z.number().int(),
  forks: z.enum(["approve", "deploy", "off"]),
  /** The previews running now (environment names). */
  running: z.array(z.string()),
  /** Forks' heads waiting for a member's approval. */
  waiting: z.array(
    z.object({
      pull_request: z.number().int(),
      commit: z.string(),
      ref: z.string(),
      repository: z.string(),
      pushed_by: z.string().nullable(),
      since: z.string(),
    }),
  ),
});

export const setBranchesBody = z.strictObject({
  /** null: follow the compose file's x-denv.branches again. */
  branches: branchPatterns.nullable(),
});

export const projectSchema = z.object({
  id: z.string(),
  name: z.string(),
  kind: z.string(),
  source_type: z.enum(["local", "git", "github"]),
  source: z.string(),
  pinned_target: z.string().nullable(),
  uploaded: z.boolean(),
  created_at: z.string(),
  /** Set with `denv project set --branches`; null: the compose file's x-denv.branches. */
  branches: z.array(z.string()).nullable(),
  /** A github: source's repository and installation, as GitHub numbers them. */
  github: z.object({ installation_id: z.string(), repository_id: z.string() }).nullable(),
});

export const uploadSourceBody = z.strictObject({
  compose: z
    .string()
    .min(1)
    .max(1024 * 1024),
  dotenv: z
    .string()
    .max(1024 * 1024)
    .optional(),
  /**
   * The build contexts of the file's services with build:, each a tar uploaded first
   * (PUT /v1/projects/{id}/contexts/{digest}): context path as written, normalised → sha256:….
   */
  build_contexts: z
    .record(z.string().min(1).max(1024), z.string().regex(/^sha256:[0-9a-f]{64}$/, "a sha256: digest"))
    .optional(),
  /**
   * The project's files and folders its relative bind mounts name, each a tar uploaded first as a
   * build context is: path as the spec normalised it → the tar's digest and whether it is a file
   * (one entry, named after it) or a folder (its contents).
   */
  bind_sources: z
    .record(
      z.string().min(1).max(1024),
      z.strictObject({
        digest: z.string().regex(/^sha256:[0-9a-f]{64}$/, "a sha256: digest"),
        type: z.enum(["file", "directory"]),
      }),
    )
    .optional(),
  /**
   * The project's files the compose file reads (env_file, secrets' file:), by their path relative
   * to it: stored sealed with the compose file and read at resolve.
   */
  files: z
    .record(
      z
        .string()
        .min(1)
        .max(1024)
        .refine((p) => !p.startsWith("/") && !p.split("/").includes("..") && !/[\0\n\r]/.test(p), {
          message: "a path inside the project",
        }),
      z.string().max(1024 * 1024),
    )
    .refine((f) => Object.keys(f).length <= 64, { message: "at most 64 files" })
    .optional(),
});

export const buildContextSchema = z.object({ digest: z.string(), size_bytes: z.number() });

export const deployBody = z.strictObject({ env: name.default("alpha") });

export const phaseSchema = z.object({
  name: z.string(),
  status: z.enum(["pending", "running", "succeeded", "failed", "skipped"]),
  started_at: z.string().nullable(),
  finished_at: z.string().nullable(),
  duration_ms: z.number().nullable(),
  evidence: z.unknown(),
  reason: z.string().nullable(),
});

/** A verify deployment's outcome: the reward, and why when it is not the verifier's own number. */
export const verifyOutcome = z.object({
  reward: z.number(),
  reason: z.string().nullable(),
  exit_code: z.number().nullable(),
  /** "frozen for inspection", or "resumed" when verify was asked to resume the agent. */
  agent: z.string(),
});

export const deploymentSchema = z.object({
  id: z.string(),
  environment_id: z.string(),
  kind: z.string(),
  status: z.enum(["queued", "running", "succeeded", "rolled_back", "failed"]),
  reason: z.string().nullable(),
  /** Who asked it to stop (POST /v1/deployments/{id}/cancel); it stops before its next phase. */
  cancel_requested_by: z.string().nullable(),
  /** The version this deployment made or restored (deploy, snapshot, rollback, fork: its parent). */
  version_id: z.string().nullable(),
  /** How long the stack was frozen for its snapshot, in ms (deploy, snapshot, verify). */
  frozen_ms: z.number().nullable(),
  /**
   * How long a create (a fork, an image sandbox) waited for a turn on its host before its record
   * began, in ms: 0 when it had one at once; null for deployments that take no turn. The place
   * phase's evidence has it with how many creates were ahead (`admission`).
   */
  admission_wait_ms: z.number().nullable(),
  /** Set on verify deployments once graded. */
  verify: verifyOutcome.nullable(),
  phases: z.array(phaseSchema),
  created_at: z.string(),
  finished_at: z.string().nullable(),
});

export const environmentSchema = z.object({
  id: z.string(),
  name: z.string(),
  project: z.string(),
  status: z.string(),
  host_id: z.string().nullable(),
  current_version_id: z.string().nullable(),
  parent_version_id: z.string().nullable(),
  sandbox: z.boolean(),
  /** The target it runs on (GET /v1/targets). */
  target: z.string(),
  services: z.array(z.string()),
  created_at: z.string(),
  /** Set on the answers of fork and sandbox creation: the deployment that made it. */
  deployment_id: z.string().optional(),
});

/** One fork of a fan-out: made, or why not (the others are not held back by it). */
export const fanOutResult = z.object({
  version_id: z.string(),
  requested: z.number(),
  created: z.number(),
  failed: z.number(),
  forks: z.array(
    z.object({
      name: z.string(),
      ok: z.boolean(),
      environment: environmentSchema.optional(),
      error: z.object({ code: z.string(), message: z.string(), details: z.unknown().optional() }).optional(),
    }),
  ),
});

export const versionSchema = z.object({
  id: z.string(),
  environment_id: z.string(),
  /** The host holding its snapshots; null for a version at a hosted provider. */
  host_id: z.string().nullable(),
  /** The target it lives on. */
  target: z.string(),
  spec_hash: z.string(),
  images: z.record(z.string(), z.string()),
  evidence: z.unknown(),
  created_at: z.string(),
});

export const versionListItem = versionSchema.extend({
  project: z.string(),
  environment: z.string(),
  /** What keeps it: environments running it or forked from it, pools, running replays. */
  in_use: z.array(z.string()),
  /** Hosts other than host_id that hold a copy of its snapshots (forks of it can run there). */
  replicas: z.array(z.string()),
});
export const drainResult = z.object({
  host_id: z.string(),
  draining: z.boolean(),
  /** Versions copied to another host because this one held the only copy (or too few were left). */
  replicated: z.array(z.object({ version_id: z.string(), to_host_id: z.string(), bytes: z.number() })),
  /** Versions that could not be copied off, each with why. */
  not_replicated: z.array(z.object({ version_id: z.string(), reason: z.string() })),
  /** Ready pool members here, withdrawn: their pools refill on other hosts holding the version. */
  pool_members_moved: z.number().int(),
});
export const replicaBody = z.strictObject({
  host: z.string().min(1).max(200).describe("The host (its name or id) to copy the version to"),
});
export const replicaResult = z.object({
  version_id: z.string(),
  host_id: z.string(),
  /** The host already held it: nothing was sent. */
  already: z.boolean(),
  from_host_id: z.string().nullable(),
  format: z.string().nullable(),
  /** The version an incremental stream was based on; null: a full stream (or nothing sent). */
  base_version_id: z.string().nullable(),
  bytes: z.number(),
  ms: z.number(),
  mib_per_s: z.number(),
  /**
   * A live version's processes on that host: the services whose process images it took, and why it
   * took none (a CPU that lacks a flag they were taken with); null for a disk-only version.
   */
  live: z.object({ held: z.array(z.string()), refused: z.string().nullable() }).nullable(),
  evidence: z.unknown(),
});
export const pruneBody = z.strictObject({
  keep: z.number().int().min(1).max(10_000).describe("Newest versions kept per environment"),
  project: z.string().min(1).max(200).optional(),
  dry_run: z.boolean().optional(),
});
export const pruneResult = z.object({
  deleted: z.array(z.string()),
  kept: z.array(z.object({ id: z.string(), reason: z.string() })),
  dry_run: z.boolean(),
  /** Images built for the pruned versions' projects that nothing pins any more, removed from their hosts. */
  images_removed: z.array(z.string()),
});

export const forkBody = z.strictObject({
  name: name.optional(),
  /** Start every service afresh, even from a live version (whose forks restore its processes). */
  cold: z.boolean().optional(),
});

/** A snapshot's options: `live` keeps every service's processes too; best-effort, those CRIU can take. */
export const snapshotBody = z.strictObject({
  live: z.union([z.boolean(), z.literal("best-effort")]).optional(),
});

/** At most this many forks in one fan-out request. */
export const MAX_FAN_OUT = 64;
export const fanOutBody = z.strictObject({
  count: z.number().int().min(1).max(MAX_FAN_OUT).describe(`How many forks (1..${MAX_FAN_OUT})`),
  /** The forks are named `<name_prefix>-1` … `<name_prefix>-N` (numbers padded to one width). */
  name_prefix: name.max(56).optional().describe("Forks are named <prefix>-1 … <prefix>-N (default: fork)"),
  name: name.optional().describe("With count 1: the fork's name, as it is"),
  /** true: sandboxes (listed and destroyed as sandboxes), as POST /v1/sandboxes makes them. */
  sandbox: z.boolean().optional(),
  /** All on this host (its name or id): a replica is made there first when it lacks the version. */
  host: z
    .string()
    .min(1)
    .max(200)
    .optional()
    .describe("Run every fork on this host (name or id); default: spread over every host with room"),
  /** From a live version: start every service afresh instead of restoring its processes. */
  cold: z.boolean().optional(),
});
/** One step of a replay's episode: a command in a service, as exec runs it. */
export const replayStep = z
  .strictObject({
    service: z.string().min(1).max(63).optional(),
    command: z
      .union([z.string().min(1).max(65_536), z.array(z.string().max(65_536)).min(1).max(4096)])
      .optional(),
    user: z.string().min(1).max(256).optional(),
    timeout_ms: z.number().int().min(1).max(MAX_COMMAND_TIMEOUT_MS).optional(),
    /** true: the version's verifier, graded on the fork (the agent stopped, its paths collected). */
    verifier: z.literal(true).optional(),
  })
  .refine((s) => (s.command === undefined) !== (s.verifier === undefined), {
    message: "a step has a command or verifier: true, not both",
  });
export const replayBody = z.strictObject({
  forks: z.number().int().min(1).max(100).optional().describe("How many forks run the episode (default 20)"),
  parallel: z.number().int().min(1).max(16).optional().describe("Forks running at once (default 4)"),
  steps: z
    .array(replayStep)
    .min(1)
    .max(256)
    .optional()
    .describe("The episode; default: the version's warm commands, then each collected path read"),
});
export const replaySchema = z.object({
  id: z.string(),
  version_id: z.string(),
  status: z.enum(["running", "identical", "diverged", "failed"]),
  request: z.object({ forks: z.number(), parallel: z.number(), steps: z.array(replayStep) }),
  /** The report (replay-runner.ts, replay-report.ts); null while it runs. */
  report: z.record(z.string(), z.unknown()).nullable(),
  /** Forks that have run the episode so far (all of them once it is done). */
  forks_done: z.number(),
  created_at: z.string(),
  finished_at: z.string().nullable(),
});
export const promoteBody = z.strictObject({
  from: name.optional().describe("The environment whose current version is promoted"),
  to: name.describe("The environment that points at the version once every gate passed"),
  version: z
    .string()
    .min(1)
    .max(300)
    .optional()
    .describe("The version (ver_…, PROJECT@ver_…) instead of from's"),
  replays: z.number().int().min(1).max(100).optional().describe("Forks the replays gate runs (default 5)"),
  soak_ms: z
    .number()
    .int()
    .min(0)
    .max(24 * 3_600_000)
    .optional()
    .describe("The soak (default 10000)"),
  steps: z.array(replayStep).min(1).max(256).optional().describe("The replays' episode"),
});
export const rollbackBody = z.strictObject({ version: z.string().min(1) });
export const verifyBody = z.strictObject({
  resume: z
    .boolean()
    .optional()
    .describe(
      "true: the agent runs again once graded; false: left frozen for inspection; absent: frozen, but an environment deploys or promotes land on (alpha) runs again",
    ),
});

/** What a sandbox from an image is made with (a pool of them is keyed by it). */
const imageSandboxSettings = {
  image: z.string().min(1),
  cmd: z.array(z.string()).optional(),
  env: z.record(z.string(), z.string()).optional(),
  ports: z.array(z.number().int().min(1).max(65535)).optional(),
  /** Paths kept across snapshot and fork (default ["/work"]). */
  volumes: z.array(z.string().regex(/^\/[^\0]*$/, "absolute paths")).optional(),
  egress: z.enum(["deny", "allow"]).optional(),
  user: z.string().optional(),
};

export const sandboxBody = z.union([
  z.strictObject({ from_version: z.string().min(1), name: name.optional() }),
  z.strictObject({ ...imageSandboxSettings, name: name.optional() }),
]);

/** A pool of sandboxes from an image: its size, and the settings a create must match to take one. */
export const imagePoolBody = z.strictObject({
  size: z.number().int().min(0).max(256).describe("Ready members to keep (0 drains the pool)"),
  ...imageSandboxSettings,
});

export const execBody = z.strictObject({
  command: z.union([z.string().min(1), z.array(z.string()).min(1)]),
  service: z.string().optional(),
  user: z.string().optional(),
  cwd: z.string().optional(),
  env: z.record(z.string(), z.string()).optional(),
  /** Standard input, base64. */
  stdin: z.string().optional(),
  timeout_ms: z.number().int().positive().max(MAX_COMMAND_TIMEOUT_MS).optional(),
  max_output_bytes: z
    .number()
    .int()
    .positive()
    .max(64 * 1024 * 1024)
    .optional(),
  /** How stdout and stderr come back: utf8 (default) or base64 for binary output. */
  encoding: z.enum(["utf8", "base64"]).optional(),
  /** A terminal of this size for the command (`exec -t`): its output all comes as stdout. */
  tty: z
    .strictObject({ rows: z.number().int().min(1).max(1000), cols: z.number().int().min(1).max(1000) })
    .optional(),
});

export const portUrlBody = z.strictObject({
  /** The service whose loopback the port is on (default: the agent's service, else the first). */
  service: z.string().optional(),
});

export const portUrlCreated = z.object({
  /** A bearer capability: anyone holding it reaches the port. Shown once; stored hashed. */
  url: z.string(),
  port: z.number(),
  service: z.string().nullable(),
  /** The port's ingress name (`{port}-{id}.{domain}`), private behind the environment's ingress token; null when the server has no ingress domain. */
  ingress_url: z.string().nullable(),
});

export const ingressNameSchema = z.object({
  host: z.string(),
  url: z.string(),
  service: z.string(),
  port: z.number(),
  /** Whether it answers without the environment's token (x-denv.ingress.public). */
  public: z.boolean(),
});

export const envIngress = z.object({
  /** `HOST[:PORT]` the names live under; null when the server has no ingress domain. */
  domain: z.string().nullable(),
  /** What a private name asks of each request, in the denv-ingress-token header (or e2b-traffic-access-token, or ?_denv_token=). */
  token: z.string().nullable(),
  /** The names the environment's deploy claimed for its published ports. */
  names: z.array(ingressNameSchema),
  /** `{port}-{id}.{domain}`: reaches any port of the environment's default service (private). */
  port_host_template: z.string().nullable(),
});

export const portUrlListed = z.object({
  id: z.string(),
  port: z.number(),
  service: z.string().nullable(),
  created_at: z.string(),
});

export const execResult = z.object({
  exit_code: z.number(),
  stdout: z.string(),
  stderr: z.string(),
  encoding: z.enum(["utf8", "base64"]),
  stdout_truncated: z.boolean(),
  /** How many bytes of output went past max_output_bytes and were dropped. */
  stdout_dropped_bytes: z.number(),
  stderr_dropped_bytes: z.number(),
  stderr_truncated: z.boolean(),
  timed_out: z.boolean(),
  duration_ms: z.number(),
});

export const targetSchema = z.object({
  name: z.string(),
  type: z.enum(["denvd", "e2b", "daytona", "modal", "prime"]),
  /** Whether it can take work now (for denvd: a host is connected). */
  available: z.boolean(),
  hosts: z.number(),
  /** What a person should know: why it is not available, or that its driver is untested live. */
  note: z.string().nullable(),
  /** Each cell in words, as shown in the console. */
  capabilities: z.object({
    multi_service_stack: z.string(),
    consistent_snapshot: z.string(),
    fork: z.string(),
    fork_time: z.string(),
    egress_deny_verified: z.string(),
    caps_enforced: z.string(),
    gpu: z.string(),
    verify: z.string(),
  }),
  /** The cells it supports (what a caller may rely on). */
  supported: z.array(z.string()),
});

/** The query of the file routes. */
export const filesQuery = z.object({
  path: z.string().optional().describe("An absolute path in the service"),
  service: z.string().optional().describe("The service (default: the agent's, else the first)"),
  user: z
    .string()
    .min(1)
    .max(256)
    .optional()
    .describe("Who reads or writes (name|uid[:group|gid]); default: the service's own user"),
});

/** A warm pool: ready forks of one version kept aside, taken by creates of that version. */
export const poolSchema = z.object({
  id: z.string(),
  version_id: z.string(),
  project_id: z.string(),
  size: z.number().int().describe("Ready members kept"),
  ready: z.number().int().describe("Members ready to be taken now"),
  warming: z.number().int().describe("Members being made"),
  hits: z.number().int().describe("Creates served from the pool"),
  misses: z.number().int().describe("Creates that found it empty and forked cold"),
  hit_rate: z.number().nullable().describe("hits / (hits + misses); null before any create"),
  source: z.enum(["api", "x-denv"]).describe("Set with denv pool set, or declared by x-denv.pool"),
  image_key: z
    .string()
    .nullable()
    .describe("For a pool of image sandboxes: the hash of the settings a create must match to take a member"),
  last_error: z.string().nullable().describe("Why the last refill failed, while refills keep failing"),
  created_at: z.string(),
});

export const poolBody = z.strictObject({
  size: z.number().int().min(0).max(256).describe("Ready members to keep (0 drains the pool)"),
});

/** A host's create turns, queue and room (admission control). */
export const admissionSchema = z.object({
  host_id: z.string(),
  running: z.number().int().describe("Creates running now"),
  parallel: z.number().int().describe("Creates the host runs at once"),
  queued: z.array(z.object({ label: z.string(), position: z.number().int(), waited_ms: z.number() })),
  queue_limit: z.number().int().describe("Creates that may wait; past it, capacity"),
  committed_memory_bytes: z.number().describe("Memory caps of what runs there and is being made"),
  memory_budget_bytes: z.number(),
  memory_free_bytes: z.number().nullable(),
  free_bytes: z.number(),
});
