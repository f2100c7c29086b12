/**
 * What a model reads rather than calls: an environment's compose spec (the resolved form its
 * version runs, images pinned), a deployment's phase log with each phase's evidence, and a
 * version's data sheet. Each is read through /v1 with the caller's key; another team's object is
 * "not found", as in the API.
 */
import { type DenvApiError, type DenvClient, NotFoundError } from "@denv/sdk";
import { type McpServer, ResourceTemplate } from "@modelcontextprotocol/sdk/server/mcp.js";
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import { stringify } from "yaml";

/** The protocol's code for a resource that does not exist. */
const RESOURCE_NOT_FOUND = -32002;
const INTERNAL_ERROR = -32603;

function variable(v: string | string[] | undefined): string {
  return decodeURIComponent(Array.isArray(v) ? (v[0] ?? "") : (v ?? ""));
}

/** A denv error as a JSON-RPC error whose data keeps denv's code. */
function resourceError(err: unknown): McpError {
  const e = err as DenvApiError;
  const code = typeof e?.code === "string" ? e.code : "internal";
  return new McpError(
    err instanceof NotFoundError ? RESOURCE_NOT_FOUND : INTERNAL_ERROR,
    `${code}: ${(err as Error).message}`,
    { code },
  );
}

async function reading<T>(body: () => Promise<T>): Promise<T> {
  try {
    return await body();
  } catch (err) {
    throw resourceError(err);
  }
}

type Phase = {
  name: string;
  status: string;
  duration_ms: number | null;
  reason: string | null;
  evidence: unknown;
};

/** The phase log as a person reads it: one block per phase, its evidence as indented JSON. */
export function renderPhaseLog(d: {
  id: string;
  kind: string;
  status: string;
  reason: string | null;
  version_id: string | null;
  phases: Phase[];
}): string {
  const lines = [`deployment ${d.id} (${d.kind}): ${d.status}`];
  if (d.reason) lines.push(`reason: ${d.reason}`);
  if (d.version_id) lines.push(`version: ${d.version_id}`);
  d.phases.forEach((p, i) => {
    const took = p.duration_ms === null ? "" : ` ${p.duration_ms} ms`;
    lines.push("", `${i + 1}. ${p.name}: ${p.status}${took}`);
    if (p.reason) lines.push(`   reason: ${p.reason}`);
    if (p.evidence !== null && p.evidence !== undefined)
      lines.push(
        ...JSON.stringify(p.evidence, null, 2)
          .split("\n")
          .map((l) => `   ${l}`),
      );
  });
  return `${lines.join("\n")}\n`;
}

export function registerDenvResources(server: McpServer, client: DenvClient): void {
  server.registerResource(
    "environment-compose",
    new ResourceTemplate("denv://environments/{environment}/compose", {
      list: async () => ({
        resources: (await client.envs.list()).environments.map((e) => ({
          uri: `denv://environments/${e.id}/compose`,
          name: `${e.project}/${e.name} compose`,
          mimeType: "application/yaml",
        })),
      }),
    }),
    {
      title: "An environment's compose spec",
      description:
        "The compose file an environment runs, in its resolved form: every service with its image pinned to a digest, the volumes and x-denv as resolved.",
      mimeType: "application/yaml",
    },
    (uri, vars) =>
      reading(async () => {
        const env = await client.envs.get(variable(vars.environment));
        const version = env.current_version_id ?? env.parent_version_id;
        if (!version) throw new NotFoundError("not_found", `environment ${env.name} has no version yet`, 404);
        const r = await client.versions.spec(version);
        return {
          contents: [
            {
              uri: uri.href,
              mimeType: "application/yaml",
              text: `# ${env.project}/${env.name} at version ${r.version_id} (resolved: images pinned)\n${stringify(r.spec)}`,
            },
          ],
        };
      }),
  );

  server.registerResource(
    "deployment-log",
    new ResourceTemplate("denv://deployments/{deployment}/log", { list: undefined }),
    {
      title: "A deployment's phase log",
      description: "Each phase of a deployment with its status, duration, reason and evidence.",
      mimeType: "text/plain",
    },
    (uri, vars) =>
      reading(async () => {
        const d = await client.deployments.get(variable(vars.deployment));
        return { contents: [{ uri: uri.href, mimeType: "text/plain", text: renderPhaseLog(d) }] };
      }),
  );

  server.registerResource(
    "version-datasheet",
    new ResourceTemplate("denv://versions/{version}/datasheet", {
      list: async () => ({
        resources: (await client.versions.list()).versions.map((v) => ({
          uri: `denv://versions/${v.id}/datasheet`,
          name: `${v.project}/${v.environment} ${v.id} data sheet`,
          mimeType: "text/markdown",
        })),
      }),
    }),
    {
      title: "A version's data sheet",
      description:
        "Digests, volumes and sizes, caps, egress, clock reach, replays, promote gates and verify results of a version.",
      mimeType: "text/markdown",
    },
    (uri, vars) =>
      reading(async () => {
        const id = variable(vars.version);
        const text = await client.getText(`/v1/versions/${encodeURIComponent(id)}/datasheet`, {
          format: "markdown",
        });
        return { contents: [{ uri: uri.href, mimeType: "text/markdown", text }] };
      }),
  );
}
