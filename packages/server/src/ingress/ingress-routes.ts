/**
 * The names an environment's deploy claims and what a request's Host header reaches. Names live in
 * `ingress_names`; `{port}-{id}` names of ports no deploy published (E2B's `getHost(port)` on a
 * sandbox) resolve from the environment itself, always private, to its default service.
 */
import type { ResolvedSpec } from "@denv/protocol";
import { environmentRow } from "../store/environment-store.ts";
import {
  environmentIngressNames,
  ingressNameByHost,
  ingressNameHolder,
  insertIngressName,
  pointIngressName,
  releaseIngressName,
  releaseIngressNames,
} from "../store/ingress-store.ts";
import type { Store } from "../store/open-store.ts";
import type { IngressNames } from "./ingress-names.ts";

/**
 * A name belongs to its environment until that is destroyed (or its record is gone): an
 * environment whose host is away for a while (`lost`), or whose deploy failed, still holds its
 * names, so no one else can take them meanwhile and have its traffic. Its owner frees them by
 * destroying it, or by deploying it without the service that published them.
 */
const GONE = new Set(["destroyed"]);

export interface IngressName {
  host: string;
  url: string;
  service: string;
  port: number;
  public: boolean;
}

export interface IngressClaim {
  names: IngressName[];
  /** Names that could not be had, and why (another environment holds it, not a DNS label). */
  refused: { service: string; host: string | null; reason: string }[];
}

/** What a request's host reaches, once the environment is known to be running. */
export interface IngressTarget {
  environmentId: string;
  teamId: string;
  hostId: string;
  stackId: string;
  /** null: the environment's default service (a `{port}-{id}` name no deploy published). */
  service: string | null;
  port: number;
  public: boolean;
  /** It has an idle timer (x-denv.idle_pause_s): a request counts, and wakes it if it paused. */
  idle: boolean;
}

/**
 * Claims an environment's names for what its spec publishes (each service's TCP ports): every port
 * by `{port}-{id}`, and each service's first port by its readable name unless another live
 * environment holds that. A redeploy replaces what the environment held.
 */
export async function claimIngressNames(
  store: Store,
  names: IngressNames,
  env: { id: string; team_id: string; name: string },
  projectName: string,
  spec: ResolvedSpec,
): Promise<IngressClaim> {
  const open = new Set(spec.ingress?.public ?? []);
  const wanted: IngressName[] = [];
  const refused: IngressClaim["refused"] = [];
  for (const [service, svc] of Object.entries(spec.services).sort(([a], [b]) => a.localeCompare(b))) {
    const ports = [...new Set(svc.ports.filter((p) => p.protocol === "tcp").map((p) => p.target))];
    if (!ports.length) continue;
    const isPublic = open.has(service);
    for (const port of ports) {
      const host = names.portHost(port, env.id);
      // `{port}-{id}` names one port of the environment: the first service (by name) publishing it.
      const first = wanted.find((w) => w.host === host);
      if (first)
        refused.push({
          service,
          host,
          reason: `${host} reaches port ${port} of ${first.service}, which publishes it too`,
        });
      else wanted.push({ host, url: names.urlFor(host), service, port, public: isPublic });
    }
    const readable = names.readableHost(
      service.toLowerCase(),
      env.name.toLowerCase(),
      projectName.toLowerCase(),
    );
    if ("reason" in readable) refused.push({ service, host: null, reason: readable.reason });
    else
      wanted.push({
        host: readable.host,
        url: names.urlFor(readable.host),
        service,
        port: ports[0] as number,
        public: isPublic,
      });
  }
  const claimed: IngressName[] = [];
  await releaseIngressNames(store, env.id);
  const insert = (n: IngressName) => insertIngressName(store, env, n);
  for (const n of wanted) {
    if (!(await insert(n))) {
      const holder = await ingressNameHolder(store, n.host);
      const held = holder?.status && !GONE.has(holder.status);
      if (holder && !held) await releaseIngressName(store, n.host, holder.environment_id);
      if (held || !(await insert(n))) {
        // Who holds it is said to its own team only: to another, that a team does is all.
        const reason =
          holder && held && holder.team_id === env.team_id
            ? `environment ${holder.project ?? "?"}/${holder.name ?? "?"} (${holder.environment_id}, ${holder.status}) holds this name until it is destroyed`
            : "another team's environment holds this name";
        refused.push({ service: n.service, host: n.host, reason });
        continue;
      }
    }
    claimed.push(n);
  }
  return { names: claimed, refused };
}

/**
 * `{port}-{id}` made to reach a given service (POST /v1/envs/{id}/ports/{port}); without a service
 * the name already reaches the default one. Returns the name's URL.
 */
export async function publishPortName(
  store: Store,
  names: IngressNames,
  env: { id: string; team_id: string },
  service: string | null,
  port: number,
): Promise<string> {
  const host = names.portHost(port, env.id);
  if (service) {
    if (!(await pointIngressName(store, env.id, host, service)))
      await insertIngressName(store, env, { host, service, port, public: false });
  }
  return names.urlFor(host);
}

/** The names an environment holds now. */
export async function listIngressNames(
  store: Store,
  names: IngressNames,
  environmentId: string,
): Promise<IngressName[]> {
  return (await environmentIngressNames(store, environmentId)).map((r) => ({
    ...r,
    url: names.urlFor(r.host),
  }));
}

/** What a Host header reaches: null when it names nothing running (the caller answers 404). */
export async function resolveIngressHost(
  store: Store,
  names: IngressNames,
  hostHeader: string | undefined | null,
): Promise<IngressTarget | null> {
  const parsed = names.parse(hostHeader);
  if (!parsed) return null;
  const row = await ingressNameByHost(store, parsed.host);
  const environmentId = row?.environmentId ?? (parsed.form === "port" ? parsed.environmentId : null);
  if (!environmentId) return null;
  const env = await environmentRow(store, environmentId);
  // A pool's member is nobody's yet; anything not running has nothing to reach, but for one its
  // idle timer paused, which the request resumes (ingress-proxy.ts).
  const reachable = env?.status === "running" || (env?.status === "paused" && env.idle_paused);
  if (!env || !reachable || env.pool_id || !env.host_id || !env.stack_id) return null;
  return {
    environmentId,
    teamId: env.team_id,
    hostId: env.host_id,
    stackId: env.stack_id,
    service: row?.service ?? null,
    port: row?.port ?? (parsed.form === "port" ? parsed.port : 0),
    public: row?.public === true,
    idle: Boolean(env.idle_pause_s),
  };
}
