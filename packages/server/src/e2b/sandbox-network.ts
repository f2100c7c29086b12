/**
 * E2B's network update (`PUT /sandboxes/{id}/network`, the SDK's `updateNetwork`) as denv's egress
 * policy change (docs/egress.md). E2B's allowOut names destinations by domain (matched on HTTP and
 * HTTPS: denv's web ports), address or CIDR (every port); its denyOut takes addresses only, and an
 * allow wins over a deny there. denv refuses what no rule allows already, so a denyOut is what
 * E2B's `ALL_TRAFFIC` says anyway and is not carried over (a deny rule in denv would win over
 * E2B's allow, the opposite of what the caller meant). What denv cannot do is refused, saying so:
 * opening the sandbox to the whole internet at run time, header rules (credentials at the proxy
 * are not built yet), an egress proxy of the caller's own, a host mask.
 */

const ADDRESS = /^\d{1,3}(\.\d{1,3}){3}(\/\d{1,2})?$/;
const MAX_RULES = 256;

export type NetworkUpdate = { allow: string[]; deny: string[] } | { error: string };

function strings(v: unknown, field: string): string[] | { error: string } {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || v.some((x) => typeof x !== "string"))
    return { error: `${field}: a list of destinations` };
  if (v.length > MAX_RULES) return { error: `${field}: at most ${MAX_RULES} destinations` };
  return v as string[];
}

export function egressFromE2bNetwork(body: Record<string, unknown>): NetworkUpdate {
  for (const field of ["rules", "egressProxy", "maskRequestHost"])
    if (body[field] !== undefined && body[field] !== null)
      return { error: `${field} is not supported by denv's egress proxy yet` };
  const allowOut = strings(body.allowOut, "allowOut");
  if ("error" in allowOut) return allowOut;
  const denyOut = strings(body.denyOut, "denyOut");
  if ("error" in denyOut) return denyOut;
  const named = denyOut.find((d) => !ADDRESS.test(d));
  if (named)
    return {
      error: `denyOut: ${named} is not an address or CIDR (domain names are not supported for deny rules)`,
    };
  const everything = (d: string) => d === "0.0.0.0/0" || d === "0.0.0.0";
  if (allowOut.some(everything))
    return {
      error:
        "allowOut: 0.0.0.0/0 is the whole internet, which a sandbox's egress policy cannot open at run time",
    };
  if (body.allow_internet_access === true && !denyOut.some(everything))
    return {
      error:
        "allow_internet_access: the sandbox's egress is a policy; name the destinations in allowOut (with denyOut ALL_TRAFFIC)",
    };
  return {
    // An address or network allows every port, as E2B's does; a name the web's (denv's default).
    allow: allowOut.map((d) => (ADDRESS.test(d) ? `${d}:1-65535` : d)),
    deny: [],
  };
}
