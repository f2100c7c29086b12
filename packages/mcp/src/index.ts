export {
  createDenvMcpServer,
  type DenvMcpOptions,
  EXEC_OUTPUT_DEFAULT_BYTES,
  EXEC_OUTPUT_MAX_BYTES,
  READ_DEFAULT_BYTES,
  READ_MAX_BYTES,
} from "./denv-mcp-server.ts";
export { renderPhaseLog } from "./denv-resources.ts";
export { McpSessions, type McpSessionsOptions } from "./mcp-sessions.ts";
