/**
 * The place phase: where a deployment goes. A connected host with room, preferring the one that
 * holds the environment's data (snapshot locality), then the most free space; a pinned target
 * narrows the choice; with no host, a new machine in a connected cloud that makes machines. A
 * project pinned to a hosted provider (E2B, Daytona, Modal, Prime) is placed there, and its one
 * service runs as the provider's sandbox (deploy/hosted-deploy.ts; several services are refused).
 */
import type { Provisioner } from "../clouds/provisioner.ts";
import { PhaseFailure } from "../deployments/phase-recorder.ts";
import { hostFreeBytes, teamHosts } from "../store/host-store.ts";
import type { Store } from "../store/open-store.ts";
import type { CloudsTable, EnvironmentsTable, ProjectsTable } from "../store/schema.ts";
import { isHosted } from "../targets/hosted-targets.ts";
import type { HostPresence } from "../targets/stack-lifecycle.ts";
import {
  assignGpus,
  describeInventory,
  describeNeed,
  type GpuAssignment,
  type GpuNeed,
  heldGpus,
  hostInventory,
} from "./gpu-placement.ts";

/** The prepare phase's refusal of a compose file with several services on a hosted target. */
export function hostedRefusal(
  target: Pick<CloudsTable, "name" | "provider">,
  services: string[],
  pinnedBy = "the project is pinned to",
): string {
  return `${pinnedBy} ${target.name}, a hosted ${target.provider} target, which runs one container per environment: this compose file has ${services.length} services (${services.join(", ")})`;
}

/** A host with less free storage than this has no capacity for another environment. */
export const MIN_FREE_BYTES = 1024 ** 3;

/**
 * Hosts too full for a new environment, said with what frees space: their environments, versions
 * nothing needs, and the images only those pinned. A full pool is never written into: an agent's
 * write would abort its filesystem's transaction and leave it read-only.
 */
export function storageShortage(hosts: { name: string; freeBytes: number }[]): string {
  const each = hosts.map((h) => `${h.name} has ${Math.round(h.freeBytes / 1024 ** 2)} MiB free`).join(", ");
  return `not enough storage for a new environment (${each}; it needs ${MIN_FREE_BYTES / 1024 ** 2} MiB): free some with \`denv env destroy ENV\` (\`denv ps -a\` lists them), \`denv version prune --keep 1\` (versions nothing uses, and the images only they pinned), or join another host (\`denv host join-token\`)`;
}

/** A host not connected but seen this recently is taken to be reconnecting. */
const RECONNECT_GRACE_MS = 60_000;

/** Where a deployment goes: a connected host, a new machine in a connected cloud, or a hosted target. */
export type Placement =
  | { host_id: string; host_name: string; reason: string; gpus?: GpuAssignment }
  | { provision: true; cloud: CloudsTable; reason: string }
  | { hosted: CloudsTable; pinned_by: string; reason: string };

export async function place(
  deps: { store: Store; hosts: HostPresence; provisioner?: Provisioner },
  project: ProjectsTable,
  env: EnvironmentsTable,
  fileTarget?: string,
  gpuNeed: GpuNeed | null = null,
): Promise<Placement & Record<string, unknown>> {
  // The project's own pin wins over the file's x-denv.target; `denvd` is the team's hosts, any of them.
  const named = project.pinned_target ?? fileTarget ?? null;
  const pinned = named === "denvd" ? null : named;
  const pinnedBy = project.pinned_target ? "the project is pinned to" : "x-denv.target names";
  const { store, provisioner } = deps;
  const online = deps.hosts;
  const hosts = await teamHosts(store, project.team_id);
  const summary = () =>
    hosts.map((h) => ({
      id: h.id,
      name: h.name,
      connected: online.hostConnected(h.id),
      free_bytes: hostFreeBytes(h),
    }));
  // A drained host (`denv host drain`) takes no new environment.
  let candidates = hosts.filter(
    (h) => online.hostConnected(h.id) && !h.draining && hostFreeBytes(h) >= MIN_FREE_BYTES,
  );
  const connected = provisioner ? await provisioner.clouds(project.team_id) : [];
  const hosted = connected.find((c) => c.name === pinned && isHosted(c.provider));
  if (hosted && gpuNeed)
    throw new PhaseFailure(
      `${pinnedBy} ${hosted.name}, a hosted ${hosted.provider} target, and the services ask for GPUs (${describeNeed(gpuNeed)}): denv asks hosted targets for no GPU (GET /v1/targets, its gpu cell); GPUs run on your own hosts`,
      { gpus: { request: gpuNeed } },
    );
  if (hosted)
    return {
      hosted,
      pinned_by: pinnedBy,
      reason: `${pinnedBy} ${hosted.name}, a hosted ${hosted.provider} target`,
    };
  // Only clouds that make machines take a deploy's provision phase.
  const clouds = connected.filter((c) => !isHosted(c.provider));
  let cloud: CloudsTable | undefined;
  if (pinned) {
    cloud = clouds.find((c) => c.name === pinned);
    if (cloud && provisioner) {
      // Pinned to a cloud: only that cloud's machines, and a new one when none has room.
      const names = new Set(await provisioner.hostNamesOf(cloud.id));
      candidates = candidates.filter((h) => names.has(h.name));
    } else {
      candidates = candidates.filter((h) => h.name === pinned || h.id === pinned);
      if (!candidates.length) {
        throw new PhaseFailure(
          `${pinnedBy} ${pinned}, which is neither a connected host with capacity nor a connected cloud`,
        );
      }
    }
  }
  // GPUs: only hosts that have the GPUs asked for free, each given particular ones.
  const given = new Map<string, GpuAssignment>();
  if (gpuNeed) {
    const held = await heldGpus(store, env.id);
    const seen = hosts.map((h) => {
      const inv = hostInventory(h);
      const r = candidates.includes(h)
        ? assignGpus(inv, held.get(h.id) ?? new Set(), gpuNeed)
        : {
            why: online.hostConnected(h.id)
              ? "not a candidate (drained, full or not the pin)"
              : "not connected",
          };
      if ("assignment" in r) given.set(h.id, r.assignment);
      return {
        name: h.name,
        connected: online.hostConnected(h.id),
        inventory: describeInventory(inv, held.get(h.id)?.size ?? 0),
        ...("why" in r ? { why: r.why } : {}),
      };
    });
    candidates = candidates.filter((h) => given.has(h.id));
    if (!candidates.length)
      throw new PhaseFailure(
        `the services ask for GPUs (${describeNeed(gpuNeed)}) and no connected host has them free: ${
          seen
            .map((s) => `${s.name}: ${s.inventory}${s.why && s.why !== s.inventory ? `; ${s.why}` : ""}`)
            .join(". ") || "the team has no host"
        }`,
        { gpus: { request: gpuNeed, hosts: seen } },
      );
  }
  if (!candidates.length && !cloud) {
    // A host seen moments ago is reconnecting (its denvd or this server restarted): the join phase
    // waits for it, instead of the deploy failing in the seconds a reconnect takes.
    const recent = hosts
      .filter(
        (h) =>
          !online.hostConnected(h.id) &&
          hostFreeBytes(h) >= MIN_FREE_BYTES &&
          Date.now() - Date.parse(h.last_seen ?? "") < RECONNECT_GRACE_MS &&
          (!pinned || h.name === pinned || h.id === pinned),
      )
      .sort((a, b) => Number(b.id === env.host_id) - Number(a.id === env.host_id));
    const back = recent[0];
    if (back)
      return {
        host_id: back.id,
        host_name: back.name,
        reason: `no host is connected; ${back.name} was seen ${Math.round((Date.now() - Date.parse(back.last_seen ?? "")) / 1000)} s ago and is awaited in the join phase`,
        hosts: summary(),
      };
  }
  if (!candidates.length) {
    cloud ??= clouds[0];
    if (cloud) {
      return {
        provision: true,
        cloud,
        reason: pinned
          ? `pinned to cloud ${cloud.name}, which has no connected machine with capacity: provisioning one`
          : `no connected host has capacity: provisioning a machine in cloud ${cloud.name}`,
        hosts: summary(),
      };
    }
    // Connected hosts that are only short of storage: what to free, not where to find another.
    const full = hosts.filter(
      (h) => online.hostConnected(h.id) && !h.draining && hostFreeBytes(h) < MIN_FREE_BYTES,
    );
    if (full.length)
      throw new PhaseFailure(
        storageShortage(full.map((h) => ({ name: h.name, freeBytes: hostFreeBytes(h) }))),
        {
          code: "insufficient_storage",
          hosts: summary(),
        },
      );
    throw new PhaseFailure(
      "no connected host with capacity: mint a token with `denv host join-token` and run the installer on a machine with Docker, or connect a cloud (`denv cloud connect hetzner`)",
      { hosts: summary() },
    );
  }
  const local = env.host_id;
  const ranked = [...candidates].sort(
    (a, b) => Number(b.id === local) - Number(a.id === local) || hostFreeBytes(b) - hostFreeBytes(a),
  );
  const chosen = ranked[0] as (typeof hosts)[number];
  return {
    host_id: chosen.id,
    host_name: chosen.name,
    ...(given.has(chosen.id) ? { gpus: given.get(chosen.id) } : {}),
    reason:
      chosen.id === local
        ? "holds the environment's current data (snapshot locality)"
        : "most free storage among connected hosts",
    candidates: ranked.map((h) => ({
      id: h.id,
      name: h.name,
      free_bytes: hostFreeBytes(h),
      storage: h.storage,
    })),
  };
}
