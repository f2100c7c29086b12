/**
 * Compose's variable interpolation, applied to every string value of the file (keys are left as
 * they are, as Compose does): `$VAR`, `${VAR}`, `${VAR:-default}` (unset or empty),
 * `${VAR-default}` (unset), `${VAR:?message}` / `${VAR?message}` (an error), `${VAR:+alt}` /
 * `${VAR+alt}`, and `$$` for a literal `$`. Defaults may themselves hold interpolations.
 */

export type Env = Readonly<Record<string, string | undefined>>;

export type InterpolationProblem =
  | { kind: "required"; variable: string; message: string }
  | { kind: "syntax"; message: string }
  | { kind: "unset"; variable: string };

export interface InterpolationResult {
  value: string;
  problems: InterpolationProblem[];
}

const NAME = /^[A-Za-z_][A-Za-z0-9_]*/;

export function interpolate(input: string, env: Env): InterpolationResult {
  const problems: InterpolationProblem[] = [];
  const value = expand(input, env, problems, 0);
  return { value, problems };
}

function expand(s: string, env: Env, problems: InterpolationProblem[], depth: number): string {
  if (depth > 20) {
    problems.push({ kind: "syntax", message: "interpolation nested more than 20 levels deep" });
    return "";
  }
  let out = "";
  let i = 0;
  while (i < s.length) {
    const dollar = s.indexOf("$", i);
    if (dollar === -1) {
      out += s.slice(i);
      break;
    }
    out += s.slice(i, dollar);
    const next = s[dollar + 1];
    if (next === "$") {
      out += "$";
      i = dollar + 2;
    } else if (next === "{") {
      const end = matchingBrace(s, dollar + 1);
      if (end === -1) {
        problems.push({ kind: "syntax", message: `unclosed "\${" in ${JSON.stringify(s)}` });
        return out + s.slice(dollar);
      }
      out += braced(s.slice(dollar + 2, end), env, problems, depth);
      i = end + 1;
    } else {
      const m = NAME.exec(s.slice(dollar + 1));
      if (m) {
        out += lookup(m[0], env, problems);
        i = dollar + 1 + m[0].length;
      } else {
        // A lone "$" (e.g. "cost: 5$") stays as written, as in Compose.
        out += "$";
        i = dollar + 1;
      }
    }
  }
  return out;
}

function matchingBrace(s: string, open: number): number {
  let depth = 0;
  for (let j = open; j < s.length; j++) {
    if (s[j] === "{") depth++;
    else if (s[j] === "}") {
      depth--;
      if (depth === 0) return j;
    }
  }
  return -1;
}

function lookup(name: string, env: Env, problems: InterpolationProblem[]): string {
  const v = env[name];
  if (v === undefined) {
    problems.push({ kind: "unset", variable: name });
    return "";
  }
  return v;
}

function braced(body: string, env: Env, problems: InterpolationProblem[], depth: number): string {
  const m = NAME.exec(body);
  if (!m) {
    problems.push({
      kind: "syntax",
      message: `invalid interpolation "\${${body}}": expected a variable name`,
    });
    return "";
  }
  const name = m[0];
  const rest = body.slice(name.length);
  if (rest === "") return lookup(name, env, problems);
  const op = /^(:-|-|:\?|\?|:\+|\+)/.exec(rest)?.[0];
  if (!op) {
    problems.push({ kind: "syntax", message: `invalid interpolation "\${${body}}": unknown operator` });
    return "";
  }
  const arg = rest.slice(op.length);
  const v = env[name];
  const unset = v === undefined;
  const empty = unset || v === "";
  switch (op) {
    case ":-":
      return empty ? expand(arg, env, problems, depth + 1) : (v as string);
    case "-":
      return unset ? expand(arg, env, problems, depth + 1) : (v as string);
    case ":?":
    case "?":
      if (op === ":?" ? empty : unset) {
        const message = expand(arg, env, problems, depth + 1);
        problems.push({
          kind: "required",
          variable: name,
          message: message || `variable ${name} is required`,
        });
        return "";
      }
      return v as string;
    case ":+":
      return empty ? "" : expand(arg, env, problems, depth + 1);
    default:
      return unset ? "" : expand(arg, env, problems, depth + 1);
  }
}

/** Parses a `.env` file as Compose does: KEY=VALUE lines, `#` comments, optional `export`, quotes. */
export function parseDotenv(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const m = /^(?:export\s+)?([A-Za-z_][A-Za-z0-9_.-]*)\s*=\s*(.*)$/.exec(line);
    if (!m) continue;
    let value = m[2] ?? "";
    if (value.startsWith('"') && value.endsWith('"') && value.length >= 2) {
      value = value.slice(1, -1).replace(/\\n/g, "\n").replace(/\\"/g, '"').replace(/\\\\/g, "\\");
    } else if (value.startsWith("'") && value.endsWith("'") && value.length >= 2) {
      value = value.slice(1, -1);
    } else {
      value = value.replace(/\s+#.*$/, "");
    }
    out[m[1] as string] = value;
  }
  return out;
}
