/** The OpenAPI 3.1 document, generated from the routes themselves (their paths and schemas). */
import { ERROR_CODES } from "@denv/protocol";
import { z } from "zod";
import type { ApiRoute } from "./api-route.ts";
import { errorSchema } from "./api-schemas.ts";

const json = (schema: z.ZodType) => z.toJSONSchema(schema, { io: "input", unrepresentable: "any" });

function responseContent(r: ApiRoute): Record<string, unknown> {
  if (r.responseType === "tar")
    return { "application/x-tar": { schema: { type: "string", format: "binary" } } };
  if (r.responseType === "any") return { "*/*": { schema: {} } };
  if (r.responseType === "event-stream") return { "text/event-stream": { schema: { type: "string" } } };
  if (r.responseType === "ndjson") return { "application/x-ndjson": { schema: { type: "string" } } };
  if (r.responseType === "multiplexed")
    return { "application/vnd.denv.multiplexed-stream": { schema: { type: "string", format: "binary" } } };
  return { "application/json": { schema: r.response ? json(r.response) : {} } };
}

function queryParameters(r: ApiRoute): Record<string, unknown>[] {
  if (!r.query) return [];
  const schema = json(r.query) as {
    properties?: Record<string, Record<string, unknown>>;
    required?: string[];
  };
  return Object.entries(schema.properties ?? {}).map(([name, s]) => ({
    name,
    in: "query",
    required: schema.required?.includes(name) ?? false,
    ...(typeof s.description === "string" ? { description: s.description } : {}),
    schema: { ...s, description: undefined },
  }));
}

export function openApiDocument(routes: readonly ApiRoute[], serverUrl?: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) {
    const op: Record<string, unknown> = {
      summary: r.summary,
      operationId: `${r.method}${r.path.replace(/\{(\w+)\}/g, "By_$1").replace(/[^A-Za-z0-9]+(.)?/g, (_m, c: string | undefined) => (c ? c.toUpperCase() : ""))}`,
      // The method the generated clients give it (api-route.ts's `name`).
      "x-denv-method": r.name,
      ...(r.auth ? {} : { security: [] }),
      parameters: [
        ...[...r.path.matchAll(/\{(\w+)\}/g)].map((m) => ({
          name: m[1],
          in: "path",
          required: true,
          schema: { type: "string" },
        })),
        ...queryParameters(r),
      ],
      responses: {
        [String(r.status ?? 200)]: { description: "success", content: responseContent(r) },
        default: { description: "error", content: { "application/json": { schema: json(errorSchema) } } },
      },
    };
    if (r.body && (r.bodyType ?? "json") === "json")
      op.requestBody = { required: true, content: { "application/json": { schema: json(r.body) } } };
    if (r.bodyType === "exec-stream")
      op.requestBody = {
        required: true,
        description: "One line of the exec request (JSON, as POST /exec takes it), then stdin to the end",
        content: { "application/octet-stream": { schema: { type: "string", format: "binary" } } },
      };
    if (r.bodyType === "tar")
      op.requestBody = {
        required: true,
        content: { "application/x-tar": { schema: { type: "string", format: "binary" } } },
      };
    paths[r.path] ??= {};
    (paths[r.path] as Record<string, unknown>)[r.method] = op;
  }
  return {
    openapi: "3.1.0",
    info: {
      title: "denv",
      version: "1",
      description: "Versioned, forkable environments for agents and reinforcement learning.",
    },
    ...(serverUrl ? { servers: [{ url: serverUrl }] } : {}),
    components: { securitySchemes: { bearer: { type: "http", scheme: "bearer" } } },
    // The error table: each code clients may see, and the HTTP status it comes with.
    "x-denv-error-codes": Object.fromEntries(
      Object.entries(ERROR_CODES).map(([code, e]) => [code, e.httpStatus]),
    ),
    security: [{ bearer: [] }],
    paths,
  };
}
