/**
 * Names a compose file or a request gives (services, volumes, networks, projects, environments)
 * become parts of engine object names, storage dataset and snapshot ids, DNS aliases and host
 * records. One rule, checked at resolve and at the API, keeps every accepted name inside what all
 * of them accept, so a name is refused up front instead of failing half-way through a deploy on
 * some host (a dataset id is `env_<12 hex>-<volume>`, a snapshot id `ver_<12 hex>-<volume>`: 17
 * characters plus the name, under every driver's limit of 128; a service name is a DNS label).
 *
 * The rule: ASCII letters, digits, "_" and "-", with single dots between them, starting with a
 * letter or digit, at most 63 characters.
 */
export const NAME_MAX_LENGTH = 63;

const NAME_PATTERN = /^[a-zA-Z0-9][a-zA-Z0-9_-]*(?:\.[a-zA-Z0-9_-]+)*$/;

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
