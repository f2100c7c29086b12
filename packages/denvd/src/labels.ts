/** Labels on every engine object denvd creates, so that reconcile can find what it owns. */
export const LABEL = {
  owner: "dev.denv.owner",
  environment: "dev.denv.environment",
  service: "dev.denv.service",
  version: "dev.denv.version",
  operation: "dev.denv.operation",
} as const;
