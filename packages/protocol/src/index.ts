/**
 * @module @denv/protocol — what crosses the boundaries between denv's parts: the error table, the
 * resolved spec (the boundary type between spec, server and denvd), the evidence every phase
 * records, and the messages and operations between the control plane and denvd.
 */

export * from "./diff-evidence.ts";
export { DenvError, ERROR_CODES, type ErrorCode, isDenvError } from "./errors.ts";
export * from "./evidence.ts";
export * from "./messages.ts";
export * from "./names.ts";
export * from "./operations.ts";
export { bytesText, printableLine, replaceTerminalControls } from "./printable.ts";
export {
  type Caps,
  capsSchema,
  DEFAULT_CAPS,
  DEFAULT_HEALTHCHECK,
  DEFAULT_NETWORK,
  DEFAULT_STOP_GRACE_PERIOD_MS,
  DEFAULT_VERIFIER_TIMEOUT_MS,
  type Healthcheck,
  KINDS,
  type Kind,
  type ResolvedService,
  type ResolvedSpec,
  resolvedSpecSchema,
} from "./resolved-spec.ts";
export * from "./stream-mux.ts";
export * from "./timeouts.ts";
