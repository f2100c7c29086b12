/** @module @denv/spec — compose + x-denv: parse, validate, resolve, pin. */

export { hostOf, readBounded } from "./bounded-fetch.ts";
export { buildField, projectRelativePath, type ResolvedBuild } from "./build-field.ts";
export { COMPOSE_FILE_NAMES } from "./compose-file-names.ts";
export { withoutSecretContents } from "./compose-secrets.ts";
export { ComposeValidator, type ComposeValidatorOptions } from "./compose-validator.ts";
export {
  decideEgress,
  type EgressDecision,
  type EgressDestination,
  type EgressPolicy,
  type EgressRule,
  ipv4Number,
  MAX_EGRESS_RULES,
  neverReached,
  normalizeEgressPolicy,
  normalizeHostName,
  type ParsedEgressPolicy,
  parseEgressPolicy,
  parseEgressRule,
  WEB_PORTS,
} from "./egress-policy.ts";
export { type GpuRequest, gpuField, gpusWanted } from "./gpu-request.ts";
export { type Env, interpolate, parseDotenv } from "./interpolate.ts";
export { formatPath, RULE_CODES, type RuleCode, type SpecIssue } from "./issues.ts";
export { MAX_COMPOSE_BYTES } from "./load-compose.ts";
export {
  ChainPinner,
  EnginePinner,
  type ImagePinner,
  type ImageReference,
  MAX_MANIFEST_BYTES,
  type PinnedImage,
  parseImageReference,
  pinSpec,
  RegistryPinner,
  type RegistryPinnerOptions,
  withBuiltImages,
  withContextDigests,
  withSeeds,
} from "./pin-images.ts";
export { RESTORABLE_CAPS } from "./restorable-caps.ts";
export { splitShellWords } from "./shell-words.ts";
export { SAFE_SYSCTLS, sysctlProblem } from "./sysctls.ts";
export { parseBytes, parseCpus, parseDurationMs } from "./units.ts";
export { isRootUser, parseNumericId, userProblem } from "./users.ts";
export {
  canonicalJson,
  type ValidateOptions,
  type ValidateResult,
  validateCompose,
  withHash,
} from "./validate-compose.ts";
export { xDenvSchema } from "./x-denv-schema.ts";
