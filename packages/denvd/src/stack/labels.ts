/** Labels on every engine object denvd creates, so that reconcile can find what it owns. */
export const LABEL = {
  owner: "dev.denv.owner",
  /** The stack an object belongs to. (Its key predates the name "stack"; objects already made carry it.) */
  stack: "dev.denv.environment",
  service: "dev.denv.service",
  version: "dev.denv.version",
  operation: "dev.denv.operation",
  /** On an image denvd built: the build key (context digest, Dockerfile, args, target) it was built for. */
  buildKey: "dev.denv.build-key",
  /** On an image denvd built: the team and project it was built for (removed with the project). */
  team: "dev.denv.team",
  project: "dev.denv.project",
} as const;
