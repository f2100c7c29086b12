/**
 * denv as Model Context Protocol tools: an agent harness or an assistant gets a sandbox of a
 * version, works in it (exec, files), snapshots it and has it graded, with no denv-specific
 * client. Every tool is a client of /v1 through the SDK with the caller's key, so team scoping,
 * rate limits and checks are the API's own; the same server runs over stdio (`denv mcp`) and over
 * Streamable HTTP (`/v1/mcp`).
 *
 * No tool hands out a key: results carry ids, output and URLs, never the caller's credentials,
 * and exec adds nothing to a command's environment, so an agent inside a sandbox never receives a
 * key through MCP.
 */
import type { DenvClient } from "@denv/sdk";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { registerDenvResources } from "./denv-resources.ts";
import { registerReadTools } from "./read-tools.ts";
import { registerWriteTools } from "./write-tools.ts";

export {
  EXEC_OUTPUT_DEFAULT_BYTES,
  EXEC_OUTPUT_MAX_BYTES,
  READ_DEFAULT_BYTES,
  READ_MAX_BYTES,
} from "./tool-schemas.ts";

export interface DenvMcpOptions {
  client: DenvClient;
  /** Only the tools that change nothing (lists, reads, the deployment record). */
  readOnly?: boolean;
  /** Reported to clients as the server's version. */
  version?: string;
}

/** The MCP server for one key: its tools and resources, registered on a fresh McpServer. */
export function createDenvMcpServer(options: DenvMcpOptions): McpServer {
  const { client } = options;
  const server = new McpServer(
    { name: "denv", version: options.version ?? "0.1.0" },
    {
      instructions:
        "denv runs whole environments (a database with data, a queue, a box with a shell) as versions " +
        "that fork in about a second. Typical episode: list_versions → create_sandbox {from_version} → " +
        "exec / read_file / write_file in it → verify (the reward) → destroy. Tools accept an " +
        "environment's id, name or project/name.",
    },
  );
  registerReadTools(server, client);
  if (!(options.readOnly ?? false)) registerWriteTools(server, client);
  registerDenvResources(server, client);
  return server;
}
