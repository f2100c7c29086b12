/**
 * How a denv answer becomes an MCP tool result: the value as structured content (checked against
 * the tool's output schema by the SDK) and as JSON text for hosts that only read text; a denv
 * error as a tool error (`isError`) that keeps the server's stable code, so an agent can act on
 * `not_found` or `conflict` rather than parse prose.
 */
import { DenvApiError } from "@denv/sdk";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";

/** Where a tool error's stable code travels (reverse-DNS, as MCP asks of `_meta` keys). */
export const ERROR_META_KEY = "dev.denv/error";

export function toolOk(value: Record<string, unknown>): CallToolResult {
  return { content: [{ type: "text", text: JSON.stringify(value, null, 2) }], structuredContent: value };
}

/**
 * A denv error (or any other) as a tool error: `code: message` as text, and the same fields under
 * `_meta["dev.denv/error"]`. Not as structured content: clients check structured content against
 * the tool's output schema even on an error (the official TypeScript client does), so an error
 * object there would turn a clean `not_found` into a schema failure.
 */
export function toolError(err: unknown): CallToolResult {
  const code = err instanceof DenvApiError ? err.code : "internal";
  const message = err instanceof Error ? err.message : String(err);
  const details = err instanceof DenvApiError ? err.details : undefined;
  return {
    isError: true,
    content: [{ type: "text", text: `${code}: ${message}` }],
    _meta: { [ERROR_META_KEY]: { code, message, ...(details !== undefined ? { details } : {}) } },
  };
}

/**
 * Bytes as text when they are UTF-8, else base64: what a model can read, and what it cannot, kept
 * exact. A character cut by an output limit at the end is left out rather than turning it all to
 * base64 (`stream: true` holds an unfinished sequence back instead of refusing it).
 */
export function decodeBytes(bytes: Uint8Array): { text: string; encoding: "utf8" | "base64" } {
  try {
    return {
      text: new TextDecoder("utf-8", { fatal: true }).decode(bytes, { stream: true }),
      encoding: "utf8",
    };
  } catch {
    return { text: Buffer.from(bytes).toString("base64"), encoding: "base64" };
  }
}
