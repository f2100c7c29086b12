/**
 * /v1/mcp: denv's tools over the Model Context Protocol's Streamable HTTP transport, with the same
 * bearer API key and team scoping as the rest of /v1 (the tools are a client of /v1, in process).
 * POST carries JSON-RPC (the answer is JSON or an event stream with progress), GET opens the
 * session's stream of server messages, DELETE ends the session.
 */
import { z } from "zod";
import { allows } from "../people/access-rules.ts";
import type { ApiContext } from "./api-deps.ts";
import type { ApiRoute } from "./api-route.ts";
import { route } from "./api-route.ts";
import { queryFlag } from "./api-schemas.ts";

/** A write_file's content travels base64 in the JSON-RPC body: room for a few MiB of it. */
const MCP_BODY_LIMIT_BYTES = 8 * 1024 * 1024;

function handle(c: ApiContext, input: { query?: { read_only?: "true" | "false" } }): Promise<Response> {
  // requireKey has checked the key; the session is bound to its id, its tools act with it (each a
  // /v1 call in process, held to the key's role there). A key that may not change anything gets a
  // session that offers only the tools that change nothing.
  const key = /^Bearer (.+)$/.exec(c.req.header("authorization") ?? "")?.[1] ?? "";
  const readOnly = input.query?.read_only === "true" || !allows(c.var.role, "change");
  return c.var.deps.mcp.handle(c.req.raw, c.var.keyId, key, { readOnly });
}

/** `denv mcp --read-only`'s counterpart, chosen by the URL a host is configured with. */
const modeQuery = z.object({
  read_only: queryFlag.describe(
    "true: the session offers only the tools that change nothing (set on its initialize request)",
  ),
});

const summary =
  "MCP (Streamable HTTP): denv's tools and resources for agents and assistants — sandboxes, exec, files, snapshot, verify — with this key's team scoping";

export const mcpRoutes: ApiRoute[] = [
  route({
    method: "post",
    path: "/v1/mcp",
    name: "mcp.post",
    summary: `${summary}; POST sends JSON-RPC messages (initialize first)`,
    responseType: "any",
    auth: true,
    // The session's transport: what each tool needs is held on /v1, as the key (see handle).
    needs: "read",
    query: modeQuery,
    bodyLimitBytes: MCP_BODY_LIMIT_BYTES,
    handler: handle,
  }),
  route({
    method: "get",
    path: "/v1/mcp",
    name: "mcp.stream",
    summary: "MCP: the session's stream of server-to-client messages (Mcp-Session-Id)",
    responseType: "any",
    auth: true,
    handler: handle,
  }),
  route({
    method: "delete",
    path: "/v1/mcp",
    name: "mcp.end",
    summary: "MCP: ends the session (Mcp-Session-Id)",
    responseType: "any",
    auth: true,
    needs: "read",
    handler: handle,
  }),
];
