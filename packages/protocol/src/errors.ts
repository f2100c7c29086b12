/**
 * denv's one error table. Every failure that crosses a boundary (HTTP, WebSocket, CLI exit, SDK)
 * carries one of these stable codes; the boundary maps the code to its own form (an HTTP status, an
 * exit code). Messages say what to do next; structured payloads go in `details`, never in the
 * message, so logs stay free of user data.
 */
export const ERROR_CODES = {
  invalid_argument: { httpStatus: 400, exitCode: 2 },
  spec_invalid: { httpStatus: 422, exitCode: 1 },
  not_found: { httpStatus: 404, exitCode: 1 },
  conflict: { httpStatus: 409, exitCode: 1 },
  unauthenticated: { httpStatus: 401, exitCode: 1 },
  forbidden: { httpStatus: 403, exitCode: 1 },
  /** A file operation the user it ran as may not do (the kernel's EACCES/EPERM, a read-only path). */
  permission_denied: { httpStatus: 403, exitCode: 1 },
  /** A file operation met a directory where it needs something else (a write never replaces one). */
  is_directory: { httpStatus: 409, exitCode: 1 },
  /** A file operation met something else where it needs a directory. */
  not_a_directory: { httpStatus: 409, exitCode: 1 },
  /** A path denv will not take as named: a symbolic link where a directory is expected (the message names it). */
  invalid_path: { httpStatus: 400, exitCode: 1 },
  payload_too_large: { httpStatus: 413, exitCode: 1 },
  /** A team's stored bytes (build contexts, uploads the server keeps) would pass its quota; details carry the figures. */
  quota_exceeded: { httpStatus: 413, exitCode: 1 },
  timeout: { httpStatus: 504, exitCode: 1 },
  unavailable: { httpStatus: 503, exitCode: 1 },
  /** The host that holds the environment is not connected (or dropped while working). */
  host_unavailable: { httpStatus: 503, exitCode: 1 },
  rate_limited: { httpStatus: 429, exitCode: 1 },
  /** The host has no room for another environment now (caps, memory, disk, or the create queue is full); retry after `details.retry_after_ms`. */
  capacity: { httpStatus: 503, exitCode: 1 },
  /**
   * The environment's target cannot do this at all (a hosted provider's sandbox has no rollback,
   * no verify): the message names the target and its capability row says why. Not retryable.
   */
  not_supported: { httpStatus: 501, exitCode: 1 },
  insufficient_storage: { httpStatus: 507, exitCode: 1 },
  image_not_found: { httpStatus: 422, exitCode: 1 },
  /**
   * A service of the environment, or a command its file declares (x-denv.warm), failed on its own:
   * the exit code and last lines are in the message and `details`. Not retryable as it is: the
   * file, the image or the program needs a change.
   */
  service_failed: { httpStatus: 422, exitCode: 1 },
  /** A service's image did not build: the message ends with the build log's last lines. */
  build_failed: { httpStatus: 422, exitCode: 1 },
  registry_error: { httpStatus: 502, exitCode: 1 },
  engine_error: { httpStatus: 502, exitCode: 1 },
  storage_error: { httpStatus: 500, exitCode: 1 },
  internal: { httpStatus: 500, exitCode: 1 },
} as const satisfies Record<string, { httpStatus: number; exitCode: number }>;

export type ErrorCode = keyof typeof ERROR_CODES;

export class DenvError extends Error {
  readonly code: ErrorCode;
  readonly details: Record<string, unknown> | undefined;

  constructor(
    code: ErrorCode,
    message: string,
    options?: { cause?: unknown; details?: Record<string, unknown> },
  ) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = "DenvError";
    this.code = code;
    this.details = options?.details;
  }

  get httpStatus(): number {
    return ERROR_CODES[this.code].httpStatus;
  }

  get exitCode(): number {
    return ERROR_CODES[this.code].exitCode;
  }

  /** The wire form: `{"error": {"code", "message"}}` (plus details when present). */
  toJSON(): { error: { code: ErrorCode; message: string; details?: Record<string, unknown> } } {
    return {
      error: { code: this.code, message: this.message, ...(this.details ? { details: this.details } : {}) },
    };
  }
}

export function isDenvError(err: unknown): err is DenvError {
  return err instanceof DenvError;
}
