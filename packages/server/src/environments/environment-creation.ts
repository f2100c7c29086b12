/**
 * New environments made other than by a deploy: forks (of an environment or a version) and
 * sandboxes (from a version, or from an image with a compose file made for it), and pools of image
 * sandboxes. Each answers once its deployment has its verdict. This is the application layer the
 * API's routes, the E2B surface and the targets call: it speaks denv's own types (the target
 * port's `SandboxSpec`, the store's rows), and the routes turn what it made into their answers.
 */
import { createHash } from "node:crypto";
import { DEFAULT_CAPS, DenvError, isDenvError } from "@denv/protocol";
import type { SecretBox } from "../clouds/secret-box.ts";
import type { Deployer } from "../deployments/deployer.ts";
import type { FetchPolicy } from "../fetch-policy.ts";
import { liveHolders, type ReplicaEvidence, type Replicator } from "../fleet/replication.ts";
import { newId } from "../ids.ts";
import type { Admission } from "../placement/admission.ts";
import { hostsWithRoom, isLiveVersion, placeFork } from "../placement/fork-placement.ts";
import { MIN_FREE_BYTES } from "../placement/placement.ts";
import { deploymentById } from "../store/deployment-store.ts";
import { environmentById, updateEnvironment } from "../store/environment-store.ts";
import { hostFreeBytes, teamHosts } from "../store/host-store.ts";
import type { Store } from "../store/open-store.ts";
import { poolOfImage } from "../store/pool-store.ts";
import { sandboxProject, setProjectSource } from "../store/project-store.ts";
import type { DeploymentsTable, EnvironmentsTable, PoolsTable, VersionsTable } from "../store/schema.ts";
import { findVersion, resolveVersionRef, versionCopyEvidence } from "../store/version-store.ts";
import type { DenvdStacks } from "../targets/denvd/denvd-stacks.ts";
import { hostedTargetNamed } from "../targets/hosted-targets.ts";
import type { ImageSandboxSpec, SandboxSpec } from "../targets/target.ts";
import type { PoolKeeper } from "./pool-keeper.ts";

/** What making environments needs: the store, the deployer, create turns, pools and the hosts. */
export interface EnvironmentDeps {
  store: Store;
  stacks: DenvdStacks;
  deployer: Deployer;
  admission: Admission;
  pools: PoolKeeper;
  replicator: Replicator;
  secrets: SecretBox;
  fetchPolicy: FetchPolicy;
}

/** An environment made: its row, and the deployment that made it (none for a hosted provider's fork). */
export interface MadeEnvironmentRow {
  env: EnvironmentsTable;
  deploymentId: string | null;
}

/** N forks of one version: how many to make, and how to name and place them. */
export interface FanOutRequest {
  count: number;
  /** The forks are named `<namePrefix>-1` … `<namePrefix>-N` (default: fork). */
  namePrefix?: string;
  /** With count 1: the fork's name, as it is. */
  name?: string;
  sandbox?: boolean;
  /** All on this host (its name or id). */
  host?: string;
  /** From a live version: every service started afresh instead of restored. */
  cold?: boolean;
}

/** Each fork of a fan-out, made or failed with its error's code and words. */
export interface FanOutOutcome {
  versionId: string;
  forks: (
    | { name: string; ok: true; made: MadeEnvironmentRow }
    | { name: string; ok: false; error: { code: string; message: string; details?: unknown } }
  )[];
}

/** The new environment once its deployment succeeded; unavailable (with the deployment) if not. */
async function createdEnv(
  deps: EnvironmentDeps,
  what: string,
  made: { deploymentId: string; environmentId: string; done: Promise<void> },
): Promise<MadeEnvironmentRow> {
  await deps.deployer.awaitVerdict(made, what);
  const d = (await deploymentById(deps.store, made.deploymentId)) as DeploymentsTable;
  if (d.status !== "succeeded") {
    throw new DenvError(
      "unavailable",
      `the ${what} failed: ${d.reason ?? "see deployment"} (deployment ${d.id})`,
      {
        details: { deployment_id: d.id },
      },
    );
  }
  return { env: await environmentById(deps.store, made.environmentId), deploymentId: d.id };
}

const sandboxName = () => `sbx-${newId("x").slice(2, 10)}`;

/** A ready member of the version's warm pool, as the caller's new environment; null if none. */
async function takeFromPool(
  deps: EnvironmentDeps,
  teamId: string,
  versionId: string,
  as: { name: string; sandbox: boolean },
): Promise<MadeEnvironmentRow | null> {
  const pooled = await deps.pools.take(teamId, versionId, as);
  return pooled ? { env: pooled.env, deploymentId: pooled.deploymentId } : null;
}

/**
 * A fork of a version: a ready member of its warm pool when it has one, else a cold fork once the
 * host gives it a create turn (admission.ts).
 */
export async function forkVersion(
  deps: EnvironmentDeps,
  teamId: string,
  versionId: string,
  name: string | undefined,
  sandbox: boolean,
  options: { onHost?: string; pinned?: boolean; cold?: boolean } = {},
): Promise<MadeEnvironmentRow> {
  const as = { name: name ?? sandboxName(), sandbox };
  const version = await findVersion(deps.store, teamId, versionId);
  if (!version.host_id) return forkHosted(deps, teamId, version, as);
  // A pool's members were started from the version as it is: a cold fork is made anew.
  const pooled = options.cold ? null : await takeFromPool(deps, teamId, versionId, as);
  if (pooled) return pooled;
  // A host that holds the version (or takes a replica of it) with a free turn (fork-placement.ts).
  // A live version's fork goes where its processes are, or to the host asked for (a fan-out's
  // share), which takes a copy with them first; never where it would start them cold.
  const live = !options.cold && isLiveVersion(version);
  const placed = live
    ? await placeLiveFork(deps, version, options.onHost)
    : await placeFork(deps, version, options);
  const ticket = await deps.admission.admit(placed.hostId, {
    memoryBytes: await deps.admission.versionMemoryBytes(version.id),
    label: `fork ${as.name}`,
  });
  try {
    return await createdEnv(
      deps,
      "fork",
      await deps.deployer.fork(versionId, {
        teamId,
        ...as,
        placed,
        admission: ticket.wait,
        ...(options.cold ? { cold: true } : {}),
      }),
    );
  } finally {
    ticket.release();
  }
}

/** A live version's fork: on a host holding its processes (least busy), or the one asked for. */
async function placeLiveFork(deps: EnvironmentDeps, version: VersionsTable, onHost: string | undefined) {
  const holders = await liveHolders(deps.store, version);
  const roomy = await hostsWithRoom(deps, version.team_id);
  const host = onHost ?? roomy.find((h) => holders.includes(h)) ?? (version.host_id as string);
  const placed = await placeFork(deps, version, { onHost: host, pinned: true });
  if (!(await liveHolders(deps.store, version)).includes(placed.hostId)) {
    const copy = (await versionCopyEvidence(deps.store, version.id)).find((c) => c.host_id === placed.hostId);
    const why = copy ? (JSON.parse(copy.evidence_json) as ReplicaEvidence).live?.refused : undefined;
    throw new DenvError(
      "not_supported",
      `host ${placed.hostId} holds version ${version.id} without its processes${why ? ` (${why})` : ""}: fork it --cold, or on a host that holds them (${holders.join(", ")})`,
    );
  }
  return placed;
}

/**
 * A fork of a version that lives at a hosted provider (a snapshot of one of its sandboxes): a new
 * sandbox made there from it, answered once the provider has it running.
 */
async function forkHosted(
  deps: EnvironmentDeps,
  teamId: string,
  version: VersionsTable,
  as: { name: string; sandbox: boolean },
): Promise<MadeEnvironmentRow> {
  const target = await hostedTargetNamed(deps, teamId, version.target_id);
  if (!target)
    throw new DenvError(
      "unavailable",
      `version ${version.id} is a snapshot at target ${version.target_id}, which is no longer connected`,
    );
  const caps = await target.capabilities(teamId);
  if (!caps.fork.supported)
    throw new DenvError("not_supported", `target ${target.name} cannot fork: ${caps.fork.detail}`);
  const made = await target.forkVersion(teamId, version.id, as.name, as.sandbox);
  return { env: await environmentById(deps.store, made.environmentId), deploymentId: made.deploymentId };
}

/** Forks a fan-out starts at once per host it spreads over; the rest wait for one of them to finish. */
const FAN_OUT_PARALLEL = 8;

/**
 * N forks of one version in one request, named `<prefix>-1` … `<prefix>-N`. Each is made (or not)
 * on its own: one that fails is reported with its code beside the ones that were made, never hidden
 * and never holding the others back.
 */
export async function fanOut(
  deps: EnvironmentDeps,
  teamId: string,
  versionId: string,
  body: FanOutRequest,
): Promise<FanOutOutcome> {
  const version = await findVersion(deps.store, teamId, versionId);
  const prefix = body.namePrefix ?? "fork";
  const width = String(body.count).length;
  if (body.name !== undefined && body.count !== 1)
    throw new DenvError("invalid_argument", "name: names one fork (count 1); name_prefix names several");
  const names =
    body.name !== undefined
      ? [body.name]
      : Array.from({ length: body.count }, (_, i) => `${prefix}-${String(i + 1).padStart(width, "0")}`);
  const forks: FanOutOutcome["forks"] = new Array(names.length);
  // Spread over every connected host with room: fork i goes to the i-th of them in turn, and a host
  // without the version takes a replica first (once, shared by its forks).
  let spread = version.host_id ? await hostsWithRoom(deps, teamId) : [];
  if (body.host !== undefined) {
    const ref = body.host;
    const pinned = (await teamHosts(deps.store, teamId)).find((h) => h.id === ref || h.name === ref);
    if (!pinned) throw new DenvError("not_found", `no host ${ref} in this team (see denv host list)`);
    if (!version.host_id)
      throw new DenvError(
        "not_supported",
        `version ${version.id} lives at target ${version.target_id}, not on hosts`,
      );
    spread = [pinned.id];
  }
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < names.length; i = next++) {
      const name = names[i] as string;
      try {
        forks[i] = {
          name,
          ok: true,
          made: await forkVersion(deps, teamId, version.id, name, body.sandbox ?? false, {
            ...(spread.length > 1 || body.host !== undefined
              ? { onHost: spread[i % spread.length] as string }
              : {}),
            ...(body.cold ? { cold: true } : {}),
          }),
        };
      } catch (err) {
        const e = isDenvError(err)
          ? err.toJSON().error
          : { code: "internal", message: `the fork failed: ${(err as Error).message}` };
        forks[i] = { name, ok: false, error: e };
      }
    }
  };
  const parallel = FAN_OUT_PARALLEL * Math.max(1, spread.length);
  await Promise.all(Array.from({ length: Math.min(parallel, names.length) }, worker));
  return { versionId: version.id, forks };
}

/** A fork of an environment is a fork of its current version (snapshotted first when it has none). */
export async function forkEnvironment(
  deps: EnvironmentDeps,
  teamId: string,
  e: EnvironmentsTable,
  name: string | undefined,
  options: { cold?: boolean } = {},
): Promise<MadeEnvironmentRow> {
  let versionId = e.current_version_id;
  if (!versionId) {
    await (await deps.deployer.snapshot(e)).done;
    versionId = (await environmentById(deps.store, e.id)).current_version_id;
    if (!versionId) throw new DenvError("conflict", `environment ${e.name} could not be snapshotted`);
  }
  return forkVersion(deps, teamId, versionId, name, false, options);
}

/** A sandbox: a fork of a version, or a one-service environment made from an image. */
export async function createSandbox(
  deps: EnvironmentDeps,
  teamId: string,
  body: SandboxSpec,
): Promise<MadeEnvironmentRow> {
  if ("fromVersion" in body) {
    // ver_…, PROJECT@ver_… or an environment (PROJECT/ENV): the seed's references.
    const version = /^ver_[0-9a-f]{12}$/.test(body.fromVersion)
      ? body.fromVersion
      : (await resolveVersionRef(deps.store, teamId, body.fromVersion)).id;
    return forkVersion(deps, teamId, version, body.name, true);
  }
  // A pool of sandboxes made with these same settings: a ready one is taken over.
  const imagePool = await poolOfImage(deps.store, teamId, sandboxImageKey(body));
  if (imagePool) {
    const pooled = await takeFromPool(deps, teamId, imagePool.version_id, {
      name: body.name ?? sandboxName(),
      sandbox: true,
    });
    if (pooled) return pooled;
  }
  const p = await sandboxProject(deps.store, teamId);
  const volumes = body.volumes ?? ["/work"];
  const egress = body.egress ?? "deny";
  // Denied egress and no ports: the sandbox needs no network at all (exec and files go through
  // its agent's socket), so none is made: no bridge, no subnet, nothing to probe but loopback.
  const isolated = egress === "deny" && !body.ports?.length;
  const compose = {
    "x-denv": { kind: "agent", egress },
    services: {
      main: {
        image: body.image,
        ...(isolated ? { network_mode: "none" } : {}),
        ...(body.cmd ? { command: body.cmd } : {}),
        ...(body.env ? { environment: body.env } : {}),
        ...(body.user ? { user: body.user } : {}),
        ...(body.ports?.length ? { expose: body.ports.map(String) } : {}),
        volumes: volumes.map((path, i) => `v${i}:${path}`),
      },
    },
    volumes: Object.fromEntries(volumes.map((_p, i) => [`v${i}`, {}])),
  };
  const sealed = deps.secrets.sealText(JSON.stringify(compose));
  const hostId = await sandboxHost(deps, teamId);
  const ticket = hostId
    ? await deps.admission.admit(hostId, {
        memoryBytes: DEFAULT_CAPS.memory_bytes,
        label: `sandbox ${body.name ?? body.image}`,
      })
    : null;
  try {
    await setProjectSource(deps.store, p.id, { compose_text: sealed });
    const made = await deps.deployer.deploy(
      { ...p, compose_text: sealed },
      body.name ?? sandboxName(),
      ticket ? { admission: ticket.wait } : {},
    );
    await updateEnvironment(deps.store, made.environmentId, { sandbox: 1 });
    return await createdEnv(deps, "sandbox", made);
  } finally {
    ticket?.release();
  }
}

/**
 * The host a sandbox's deploy will be placed on (placement.ts: the connected host with the most
 * free storage), for its create turn; null when there is none (the deploy says why).
 */
async function sandboxHost(deps: EnvironmentDeps, teamId: string): Promise<string | null> {
  const hosts = (await teamHosts(deps.store, teamId)).filter(
    (h) => deps.stacks.hostConnected(h.id) && hostFreeBytes(h) >= MIN_FREE_BYTES,
  );
  hosts.sort((a, b) => hostFreeBytes(b) - hostFreeBytes(a));
  return hosts[0]?.id ?? null;
}

type ImageSettings = Omit<ImageSandboxSpec, "name">;

/**
 * What makes two image sandboxes the same (everything but the name), with the defaults filled in
 * and order that does not matter removed: a pool's key.
 */
export function sandboxImageKey(body: ImageSettings & { name?: string }): string {
  const env = Object.entries(body.env ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const settings = {
    image: body.image,
    cmd: body.cmd ?? null,
    env,
    ports: [...(body.ports ?? [])].sort((a, b) => a - b),
    volumes: body.volumes ?? ["/work"],
    egress: body.egress ?? "deny",
    user: body.user ?? null,
  };
  return createHash("sha256").update(JSON.stringify(settings)).digest("hex");
}

/**
 * Sets the size of the pool of sandboxes made with these settings (0 drains it). The first time,
 * one sandbox is made with them and its first version kept (the sandbox itself is destroyed): the
 * members are forks of it, as a fork of any version is.
 */
export async function setImagePool(
  deps: EnvironmentDeps,
  teamId: string,
  size: number,
  settings: ImageSettings,
): Promise<PoolsTable | null> {
  const key = sandboxImageKey(settings);
  const existing = await poolOfImage(deps.store, teamId, key);
  if (existing) return deps.pools.set(teamId, existing.version_id, size, "api", key);
  if (size === 0) return null;
  const template = await createSandbox(deps, teamId, {
    ...settings,
    name: `pool-template-${key.slice(0, 12)}`,
  });
  try {
    if (!template.env.current_version_id)
      throw new DenvError("internal", "the pool's first sandbox has no version");
    return await deps.pools.set(teamId, template.env.current_version_id, size, "api", key);
  } finally {
    await (await deps.deployer.destroy(await environmentById(deps.store, template.env.id))).done;
  }
}
