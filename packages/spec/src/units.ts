/**
 * Compose's units. Durations follow Go's time.ParseDuration ("1m30s", "500ms", "2s", "1.5h"), which
 * Compose uses for healthchecks and grace periods; a bare number is seconds, as Compose reads it for
 * stop_grace_period. Byte sizes follow docker/go-units RAMInBytes: binary multiples, with an optional
 * "b"/"ib" suffix, case-insensitive ("2g", "512m", "1gb", "1GiB").
 */

const DURATION_UNITS_MS: Record<string, number> = {
  ns: 1e-6,
  us: 1e-3,
  µs: 1e-3,
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
};

/** Milliseconds in a Go duration string, or undefined when it is not one. */
export function parseDurationMs(value: string | number): number | undefined {
  if (typeof value === "number") return Number.isFinite(value) && value >= 0 ? value * 1000 : undefined;
  const s = value.trim();
  if (s === "0") return 0;
  if (
    !/^(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h)(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|ms|s|m|h))*$/.test(s)
  ) {
    return undefined;
  }
  let total = 0;
  for (const m of s.matchAll(/(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)/g)) {
    total += Number(m[1]) * (DURATION_UNITS_MS[m[2] as string] ?? Number.NaN);
  }
  return Number.isFinite(total) ? Math.round(total) : undefined;
}

const BYTE_MULTIPLIERS: Record<string, number> = {
  "": 1,
  k: 1024,
  m: 1024 ** 2,
  g: 1024 ** 3,
  t: 1024 ** 4,
  p: 1024 ** 5,
};

/** Bytes in a Compose memory size, or undefined when it is not one. */
export function parseBytes(value: string | number): number | undefined {
  if (typeof value === "number") return Number.isSafeInteger(value) && value >= 0 ? value : undefined;
  const m = /^(\d+(?:\.\d+)?) ?([kmgtp])?(?:i?b)?$/i.exec(value.trim());
  if (!m) return undefined;
  const bytes = Number(m[1]) * (BYTE_MULTIPLIERS[(m[2] ?? "").toLowerCase()] ?? Number.NaN);
  return Number.isFinite(bytes) && bytes <= Number.MAX_SAFE_INTEGER ? Math.floor(bytes) : undefined;
}

/** CPUs as Compose gives them: a number or a numeric string ("0.5"). */
export function parseCpus(value: string | number): number | undefined {
  const n =
    typeof value === "number" ? value : /^\s*\d+(?:\.\d+)?\s*$/.test(value) ? Number(value) : Number.NaN;
  return Number.isFinite(n) && n > 0 ? n : undefined;
}
