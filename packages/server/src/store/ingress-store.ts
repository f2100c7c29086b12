/**
 * The ingress names environments hold (`ingress_names`, keyed by host name: two environments
 * cannot hold one name), and what a host name reaches.
 */
import { now } from "../ids.ts";
import type { Store } from "./open-store.ts";

export interface IngressNameRow {
  host: string;
  service: string;
  port: number;
  public: boolean;
}

/** A name for an environment; false when the name is held already (the host is the key). */
export function insertIngressName(
  store: Store,
  env: { id: string; team_id: string },
  n: IngressNameRow,
): Promise<boolean> {
  return store
    .insertInto("ingress_names")
    .values({
      host: n.host,
      environment_id: env.id,
      team_id: env.team_id,
      service: n.service,
      port: n.port,
      public: n.public ? 1 : 0,
      created_at: now(),
    })
    .execute()
    .then(
      () => true,
      () => false,
    );
}

/** Who holds a name: its environment, that environment's team, status, name and project's name. */
export function ingressNameHolder(store: Store, host: string) {
  return store
    .selectFrom("ingress_names")
    .leftJoin("environments", "environments.id", "ingress_names.environment_id")
    .leftJoin("projects", "projects.id", "environments.project_id")
    .select([
      "ingress_names.environment_id",
      "ingress_names.team_id",
      "environments.status",
      "environments.name",
      "projects.name as project",
    ])
    .where("ingress_names.host", "=", host)
    .executeTakeFirst();
}

/** A name given up by the environment that held it (none other's is touched). */
export async function releaseIngressName(store: Store, host: string, environmentId: string): Promise<void> {
  await store
    .deleteFrom("ingress_names")
    .where("host", "=", host)
    .where("environment_id", "=", environmentId)
    .execute();
}

/** Every name an environment holds given up (it is destroyed, or deployed again). */
export async function releaseIngressNames(store: Store, environmentId: string): Promise<void> {
  await store.deleteFrom("ingress_names").where("environment_id", "=", environmentId).execute();
}

/** A name the environment holds pointed at a service; false when it holds no such name. */
export async function pointIngressName(
  store: Store,
  environmentId: string,
  host: string,
  service: string,
): Promise<boolean> {
  const r = await store
    .updateTable("ingress_names")
    .set({ service })
    .where("host", "=", host)
    .where("environment_id", "=", environmentId)
    .executeTakeFirst();
  return Number(r.numUpdatedRows) > 0;
}

/** The names an environment holds, by host name. */
export async function environmentIngressNames(
  store: Store,
  environmentId: string,
): Promise<IngressNameRow[]> {
  const rows = await store
    .selectFrom("ingress_names")
    .selectAll()
    .where("environment_id", "=", environmentId)
    .orderBy("host")
    .execute();
  return rows.map((r) => ({ host: r.host, service: r.service, port: r.port, public: r.public === 1 }));
}

/** What a host name is recorded to reach, if anything. */
export async function ingressNameByHost(
  store: Store,
  host: string,
): Promise<{ environmentId: string; service: string; port: number; public: boolean } | undefined> {
  const r = await store
    .selectFrom("ingress_names")
    .select(["environment_id", "service", "port", "public"])
    .where("host", "=", host)
    .executeTakeFirst();
  return r && { environmentId: r.environment_id, service: r.service, port: r.port, public: r.public === 1 };
}
