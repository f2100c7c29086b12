/**
 * What the API refuses, as classes: one per family of error codes, each a DenvApiError carrying
 * the server's stable code, so callers write `catch (e) { if (e instanceof NotFoundError) … }`
 * or branch on `e.code`, never on message text.
 */

/** Every error the SDK throws: the server's code, the HTTP status, and structured details. */
export class DenvApiError extends Error {
  /** The stable code (the server's error table). */
  readonly code: string;
  /** The HTTP status it came with (0: the server was not reached). */
  readonly status: number;
  readonly details: unknown;
  constructor(code: string, message: string, status: number, details?: unknown) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.details = details;
  }
}

/** not_found: no such object (another team's included), path, or route. */
export class NotFoundError extends DenvApiError {}
/** invalid_argument, spec_invalid, invalid_path: the request, the compose file or a path was refused; the message says where. */
export class InvalidArgumentError extends DenvApiError {}
/** unauthenticated: no key, or a key the server does not know. */
export class AuthenticationError extends DenvApiError {}
/** forbidden, permission_denied: the key, or the user a file operation ran as, may not do this. */
export class PermissionDeniedError extends DenvApiError {}
/** conflict, is_directory, not_a_directory: the object is not in a state (or of a kind) for this. */
export class ConflictError extends DenvApiError {}
/** rate_limited: the key is over its rate limit; retry after `details.retry_after_ms`. */
export class RateLimitError extends DenvApiError {}
/** payload_too_large, quota_exceeded: the body, what was asked for, or the team's stored bytes are over a limit. */
export class PayloadTooLargeError extends DenvApiError {}
/** timeout: an operation ran past its deadline. */
export class TimeoutError extends DenvApiError {}
/** unavailable, host_unavailable, capacity: the server, the host or the service cannot answer (or take more) now; retry. */
export class UnavailableError extends DenvApiError {}
/** not_supported: the environment's target cannot do this at all (its row in /v1/targets says why); do not retry. */
export class NotSupportedError extends DenvApiError {}
/** insufficient_storage, storage_error: the host's storage refused. */
export class StorageError extends DenvApiError {}
/** service_failed: a service exited, or a command the file declares failed; the exit code and last lines are in `details`. Not retryable as it is. */
export class ServiceFailedError extends DenvApiError {}
/** image_not_found, registry_error, build_failed: an image could not be found, pinned or built. */
export class ImageError extends DenvApiError {}
/** internal, engine_error, and codes this SDK does not know: a fault on the server's side. */
export class InternalError extends DenvApiError {}

const FAMILIES: Record<
  string,
  new (
    code: string,
    message: string,
    status: number,
    details?: unknown,
  ) => DenvApiError
> = {
  not_found: NotFoundError,
  invalid_argument: InvalidArgumentError,
  spec_invalid: InvalidArgumentError,
  invalid_path: InvalidArgumentError,
  unauthenticated: AuthenticationError,
  forbidden: PermissionDeniedError,
  permission_denied: PermissionDeniedError,
  conflict: ConflictError,
  is_directory: ConflictError,
  not_a_directory: ConflictError,
  rate_limited: RateLimitError,
  payload_too_large: PayloadTooLargeError,
  quota_exceeded: PayloadTooLargeError,
  timeout: TimeoutError,
  unavailable: UnavailableError,
  host_unavailable: UnavailableError,
  capacity: UnavailableError,
  not_supported: NotSupportedError,
  insufficient_storage: StorageError,
  storage_error: StorageError,
  service_failed: ServiceFailedError,
  image_not_found: ImageError,
  build_failed: ImageError,
  registry_error: ImageError,
  engine_error: InternalError,
  internal: InternalError,
};

/** The error for a code, of its family's class. */
export function apiError(code: string, message: string, status: number, details?: unknown): DenvApiError {
  const Family = FAMILIES[code] ?? InternalError;
  return new Family(code, message, status, details);
}

/** The codes each family covers (for a test that holds them to the server's table). */
export const ERROR_FAMILIES: Readonly<Record<string, string>> = Object.fromEntries(
  Object.entries(FAMILIES).map(([code, cls]) => [code, cls.name]),
);
