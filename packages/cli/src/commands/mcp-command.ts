/**
 * `denv mcp`: denv's tools for a local MCP host (an agent harness, an assistant) over stdin and
 * stdout, acting with the CLI's key (--api-key, DENV_API_KEY, then `denv login`'s). stdout is the
 * protocol's alone: nothing else is printed there.
 */
import type { Command } from "commander";
import { run } from "./command-runner.ts";

export function registerMcpCommand(program: Command, version: string): void {
  const mcp = program
    .command("mcp")
    .description(
      "Serve denv's tools and resources to an MCP host over stdio (sandboxes, exec, files, verify)",
    )
    .option("--read-only", "only the tools that change nothing: lists, file reads, deployment records");
  mcp.action(
    run(mcp, async (client) => {
      const o = mcp.opts() as { readOnly?: boolean };
      // The MCP SDK loads here, not with every command: `denv server` would hold it resident.
      const [{ createDenvMcpServer }, { StdioServerTransport }] = await Promise.all([
        import("@denv/mcp"),
        import("@modelcontextprotocol/sdk/server/stdio.js"),
      ]);
      const server = createDenvMcpServer({ client: client(), readOnly: o.readOnly === true, version });
      const transport = new StdioServerTransport();
      const closed = new Promise<void>((resolve) => {
        transport.onclose = () => resolve();
        process.stdin.once("end", () => resolve());
      });
      await server.connect(transport);
      await closed;
      await server.close().catch(() => {});
      return 0;
    }),
  );
  mcp.addHelpText(
    "after",
    `
A host's configuration (e.g. an mcpServers entry):
  {"command": "denv", "args": ["mcp"], "env": {"DENV_SERVER": "http://127.0.0.1:7070", "DENV_API_KEY": "dk_..."}}
The server also serves the same tools over Streamable HTTP at /v1/mcp (Authorization: Bearer <key>).`,
  );
}
