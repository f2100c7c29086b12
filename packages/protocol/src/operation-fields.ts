/** The ids host operations name things by: stacks, versions, and byte streams on a connection. */
import { z } from "zod";

/** A stack on a host: `stk_` and 12 hex digits (older hosts made `env_…`; both are accepted). */
export const stackId = z.string().regex(/^(stk|env)_[0-9a-f]{12}$/, "a stack id (stk_…)");
/** A version: `ver_` and 12 hex digits, made by the host that snapshotted it. */
export const versionId = z.string().regex(/^ver_[0-9a-f]{12}$/, "a version id (ver_…)");
/**
 * A byte stream on the host's connection (stream-mux.ts), named by the server in the operation
 * that uses it. The host opens its side when the operation arrives, before any of its frames.
 */
export const streamId = z.number().int().min(1).max(0xffffffff);
