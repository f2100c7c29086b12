export {
  type ClientOptions,
  DenvApiError,
  DenvClient,
  type LogLine,
  OPERATIONS,
  type Operations,
} from "./client.ts";
export {
  AuthenticationError,
  apiError,
  ConflictError,
  ERROR_FAMILIES,
  ImageError,
  InternalError,
  InvalidArgumentError,
  NotFoundError,
  NotSupportedError,
  PayloadTooLargeError,
  PermissionDeniedError,
  RateLimitError,
  ServiceFailedError,
  StorageError,
  TimeoutError,
  UnavailableError,
} from "./errors.ts";
export {
  type CommandResult,
  Commands,
  Denv,
  type Deployment,
  type EnvironmentInfo,
  type RunOptions,
  Sandbox,
  type SandboxOptions,
} from "./sandbox.ts";
export { type FileEntry, type FileOptions, Files } from "./sandbox-files.ts";
export type * from "./schema.gen.ts";
