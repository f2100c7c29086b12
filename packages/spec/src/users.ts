/**
 * Users as the engine reads them. `user:` is NAME|UID[:GROUP|GID]; a numeric part is parsed the way
 * the engine does (Go's strconv.Atoi: an optional sign, then digits), so "+0", "-0" and "000" are
 * all uid 0 and must count as root here too. A name is resolved inside the container at run time,
 * where denvd checks the agent's real uid again (a name can map to uid 0 in the image).
 */

/** The largest uid or gid the engine accepts (runc refuses ids above 2^31 - 1). */
export const MAX_ID = 2_147_483_646;

/** A numeric uid or gid as the engine reads it, or null when the part is a name. */
export function parseNumericId(part: string): number | null {
  if (!/^[+-]?\d+$/.test(part)) return null;
  const n = Number(part);
  return Object.is(n, -0) ? 0 : n;
}

/** True for any spelling of uid 0 or of the name root in the user part: root, 0, +0, -0, 000. */
export function isRootUser(user: string): boolean {
  const name = (user.split(":")[0] ?? "").trim();
  return name === "root" || parseNumericId(name) === 0;
}

/** Why a user spec is refused (a numeric id out of range, an empty part), or null. */
export function userProblem(user: string): string | null {
  const parts = user.split(":");
  if (parts.length > 2) return `"${user}" is not NAME|UID[:GROUP|GID]`;
  for (const part of parts) {
    if (part.trim() === "") return `"${user}" has an empty part`;
    const id = parseNumericId(part);
    if (id !== null && (id < 0 || id > MAX_ID))
      return `"${part}" is not a uid or gid the engine accepts (0 to ${MAX_ID})`;
  }
  return null;
}
