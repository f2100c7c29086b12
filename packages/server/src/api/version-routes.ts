/** A team's versions: list, delete one nothing uses, prune by a retention, and each one's data sheet. */
import { DenvError, type ResolvedSpec } from "@denv/protocol";
import { withoutSecretContents } from "@denv/spec";
import { z } from "zod";
import { versionHolders } from "../fleet/replication.ts";
import { pruneVersions, removeVersion } from "../fleet/version-removal.ts";
import { teamHosts } from "../store/host-store.ts";
import type { Store } from "../store/open-store.ts";
import { findProject } from "../store/project-store.ts";
import type { VersionsTable } from "../store/schema.ts";
import {
  resolveVersionRef,
  setVersionReplicas,
  teamVersions,
  versionPlace,
  versionUsers,
} from "../store/version-store.ts";
import { type ApiRoute, route } from "./api-route.ts";
import { pruneBody, pruneResult, replicaBody, replicaResult, versionListItem } from "./api-schemas.ts";
import { serializeVersion } from "./api-serializers.ts";
import { buildDatasheet, datasheetMarkdown } from "./datasheet.ts";

async function listItem(store: Store, v: VersionsTable): Promise<z.infer<typeof versionListItem>> {
  return {
    ...serializeVersion(v),
    ...(await versionPlace(store, v)),
    in_use: await versionUsers(store, v.id),
    replicas: (await versionHolders(store, v)).slice(1),
  };
}

export const versionRoutes: ApiRoute[] = [
  route({
    method: "get",
    path: "/v1/versions",
    name: "versions.list",
    summary: "The team's versions, newest first, each with what keeps it (in_use)",
    query: z.object({ project: z.string().min(1).max(200).optional() }),
    response: z.object({ versions: z.array(versionListItem) }),
    auth: true,
    handler: async (c, { query }) => {
      const { store } = c.var.deps;
      const project = query.project ? await findProject(store, c.var.teamId, query.project) : null;
      const rows = await teamVersions(store, c.var.teamId, project?.id);
      return c.json({ versions: await Promise.all(rows.map((v) => listItem(store, v))) });
    },
  }),
  route({
    method: "delete",
    path: "/v1/versions/{id}",
    name: "versions.delete",
    summary:
      "Delete a version nothing uses (its snapshots on every host holding them, and its record); in use: 409 naming what uses it",
    response: z.object({
      deleted: z.string(),
      left_on: z
        .array(z.string())
        .describe(
          "Hosts that were not connected: each deletes its copy of the snapshots when it next connects",
        ),
    }),
    auth: true,
    handler: async (c) => {
      const v = await resolveVersionRef(c.var.deps.store, c.var.teamId, c.req.param("id") ?? "");
      const leftOn = await removeVersion(c.var.deps, v);
      return c.json({ deleted: v.id, left_on: leftOn });
    },
  }),
  route({
    method: "post",
    path: "/v1/versions/prune",
    name: "versions.prune",
    summary:
      "Retention: keep each live environment's newest `keep` versions; delete the others nothing uses (a destroyed environment's included; dry_run: only say which)",
    body: pruneBody,
    response: pruneResult,
    auth: true,
    handler: async (c, { body }) => {
      const { deleted, kept, imagesRemoved } = await pruneVersions(c.var.deps, c.var.teamId, {
        keep: body.keep,
        project: body.project,
        dryRun: body.dry_run ?? false,
      });
      return c.json({ deleted, kept, dry_run: body.dry_run ?? false, images_removed: imagesRemoved });
    },
  }),
  route({
    method: "post",
    path: "/v1/versions/{id}/replicas",
    name: "versions.copy",
    summary:
      "Copy a version's snapshots to another of the team's hosts (btrfs send/receive, incremental where both hold an earlier version; a tar between drivers): forks of it can then run there",
    body: replicaBody,
    response: replicaResult,
    status: 201,
    auth: true,
    handler: async (c, { body }) => {
      const { store, replicator } = c.var.deps;
      const version = await resolveVersionRef(store, c.var.teamId, c.req.param("id") ?? "");
      const host = (await teamHosts(store, c.var.teamId)).find(
        (h) => h.id === body.host || h.name === body.host,
      );
      if (!host) throw new DenvError("not_found", `no host ${body.host} in this team (see denv host list)`);
      const made = await replicator.replicate(version, host.id);
      return c.json(
        {
          version_id: version.id,
          host_id: host.id,
          already: made === null,
          from_host_id: made?.from_host_id ?? null,
          format: made?.format ?? null,
          base_version_id: made?.base_version_id ?? null,
          bytes: made?.bytes ?? 0,
          ms: made?.ms ?? 0,
          mib_per_s: made?.mib_per_s ?? 0,
          live: made?.live ? { held: made.live.held, refused: made.live.refused ?? null } : null,
          evidence: made,
        },
        201,
      );
    },
  }),
  route({
    method: "put",
    path: "/v1/versions/{id}/replicas",
    name: "versions.keepReplicas",
    summary:
      "Keep N copies of a version on distinct hosts (as x-denv.replicas does): copies are made now and again whenever a host holding one is lost or drained",
    body: z.strictObject({ copies: z.number().int().min(1).max(16) }),
    response: z.object({
      version_id: z.string(),
      copies: z.number().int(),
      /** The hosts holding it now: the one it was taken on first. */
      holders: z.array(z.string()),
      /** Copies made by this call. */
      made: z.array(z.string()),
    }),
    auth: true,
    handler: async (c, { body }) => {
      const { store, replicas } = c.var.deps;
      const version = await resolveVersionRef(store, c.var.teamId, c.req.param("id") ?? "");
      if (!version.host_id)
        throw new DenvError(
          "not_supported",
          `version ${version.id} lives at target ${version.target_id}, not on hosts`,
        );
      await setVersionReplicas(store, version.id, body.copies);
      const made = await replicas.keep({ ...version, replicas: body.copies }, body.copies);
      return c.json({
        version_id: version.id,
        copies: body.copies,
        holders: await versionHolders(store, version),
        made,
      });
    },
  }),
  route({
    method: "get",
    path: "/v1/versions/{id}/spec",
    name: "versions.spec",
    summary:
      "A version's resolved spec: every service with its image pinned, the volumes, x-denv as resolved (what export writes other formats from)",
    response: z.object({
      version_id: z.string(),
      project: z.string(),
      spec: z.record(z.string(), z.unknown()),
    }),
    auth: true,
    handler: async (c) => {
      const { store, secrets } = c.var.deps;
      const version = await resolveVersionRef(store, c.var.teamId, c.req.param("id") ?? "");
      const place = await versionPlace(store, version);
      const spec = JSON.parse(secrets.openText(version.spec_json));
      return c.json({
        version_id: version.id,
        project: place.project,
        // A hosted provider's snapshot is described by its target alone: it holds no secret values.
        spec: version.host_id
          ? (withoutSecretContents(spec as ResolvedSpec) as unknown as Record<string, unknown>)
          : spec,
      });
    },
  }),
  route({
    method: "get",
    path: "/v1/versions/{id}/datasheet",
    name: "versions.datasheet",
    summary:
      "A version's data sheet: digests, volumes and sizes, caps, egress, clock reach, replays, every promote's gate evidence, verify results; ?format=markdown for people",
    query: z.object({ format: z.enum(["json", "markdown"]).optional() }),
    response: z.record(z.string(), z.unknown()),
    responseType: "any",
    auth: true,
    handler: async (c, { query }) => {
      const { store, secrets } = c.var.deps;
      const version = await resolveVersionRef(store, c.var.teamId, c.req.param("id") ?? "");
      const sheet = await buildDatasheet(store, secrets, version);
      if (query.format === "markdown") {
        c.header("content-type", "text/markdown; charset=utf-8");
        return c.body(datasheetMarkdown(sheet));
      }
      return c.json(sheet);
    },
  }),
];
