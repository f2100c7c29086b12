/**
 * Names a compose file or a request gives (services, volumes, networks, projects, environments),
 * checked by this one rule in the spec (at resolve), the API and denvd (before it acts). Such names
 * become parts of engine object names, storage dataset and snapshot ids, DNS aliases and host
 * records. One rule, checked at resolve and at the API, keeps every accepted name inside what all
 * of them accept, so a name is refused up front instead of failing half-way through a deploy on
 * some host (a dataset id is `env_<12 hex>-<volume>`, a snapshot id `ver_<12 hex>-<volume>`: 17
 * characters plus the name, under every driver's limit of 128; a service name is a DNS label).
 *
 * The rule: ASCII letters, digits, "_" and "-", with single dots between them, starting with a
 * letter or digit, at most 63 characters.
 */
import { z } from "zod";

export const NAME_MAX_LENGTH = 63;

export const NAME_PATTERN = /^[a-zA-Z0-9][a-zA-Z0-9_-]*(?:\.[a-zA-Z0-9_-]+)*$/;

export const NAME_RULE =
  'ASCII letters, digits, "_" or "-" (single dots between them), starting with a letter or digit, at most 63 characters';

/** Why a name is refused, or null when every driver and the engine accept it. */
export function nameProblem(name: string): string | null {
  if (name.length === 0) return "is empty";
  if (name.length > NAME_MAX_LENGTH)
    return `is ${name.length} characters long; the limit is ${NAME_MAX_LENGTH}`;
  if (!NAME_PATTERN.test(name)) return `must be ${NAME_RULE}`;
  return null;
}

export function isValidName(name: string): boolean {
  return nameProblem(name) === null;
}

/** The rule as a schema, for the API's bodies and paths (its pattern and limit land in OpenAPI). */
export const nameSchema = z.string().max(NAME_MAX_LENGTH).regex(NAME_PATTERN, NAME_RULE);

/** A stack's name on its host (what `docker ps` and the host's records show): at most this long. */
export const STACK_NAME_MAX_LENGTH = 200;
export const stackNameSchema = z.string().min(1).max(STACK_NAME_MAX_LENGTH);

/**
 * The name of the stack an environment runs as on its host: PROJECT-ENV, with a part of its own
 * for a stack that is not the environment's (a promote's trial, a grader's fork). Every part is a
 * name the rule accepted or one denv made, so the whole stays within STACK_NAME_MAX_LENGTH.
 */
export function stackName(project: string, environment: string, ...more: string[]): string {
  return [project, environment, ...more].join("-").slice(0, STACK_NAME_MAX_LENGTH);
}

/**
 * A destroyed environment's name, kept on its record but freed for a new environment of the same
 * name: NAME~ID, which the rule never accepts, so no request can name it again.
 */
export function retiredEnvironmentName(name: string, id: string): string {
  return `${name}~${id}`;
}
