/**
 * The benchmark's statistics: interpolated percentiles, the p5–p95 spread, a bootstrap interval of
 * the median, and goals judged on that interval (a goal is met only when the whole interval clears
 * it, so one lucky sample cannot meet it). Every figure keeps its samples.
 */

export interface Metric {
  /** The median of the samples (or the one measured value). */
  value: number;
  unit: string;
  samples?: number[];
  /** Interpolated 5th and 95th percentiles of the samples. */
  p5?: number;
  p95?: number;
  /** A 95% bootstrap interval of the median. */
  ci?: [number, number];
  note?: string;
}

/** The p-quantile (0..1) by linear interpolation between the closest ranks (R's type 7). */
export function percentile(xs: readonly number[], p: number): number {
  if (xs.length === 0) return Number.NaN;
  const sorted = [...xs].sort((a, b) => a - b);
  const at = (sorted.length - 1) * Math.min(1, Math.max(0, p));
  const lo = Math.floor(at);
  const hi = Math.ceil(at);
  return (sorted[lo] as number) + ((sorted[hi] as number) - (sorted[lo] as number)) * (at - lo);
}

/**
 * A small seeded generator (mulberry32): the same samples give the same interval every time, and
 * the chaos test's failing run can be replayed with its seed.
 */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The percentile bootstrap interval of the median, from `rounds` resamples. */
export function medianInterval(xs: readonly number[], level = 0.95, rounds = 2000): [number, number] {
  if (xs.length < 2) return [xs[0] ?? Number.NaN, xs[0] ?? Number.NaN];
  const random = seededRandom(xs.length * 7919 + Math.round((xs[0] as number) * 1000));
  const medians: number[] = [];
  for (let r = 0; r < rounds; r++) {
    const resample = Array.from({ length: xs.length }, () => xs[Math.floor(random() * xs.length)] as number);
    medians.push(percentile(resample, 0.5));
  }
  return [percentile(medians, (1 - level) / 2), percentile(medians, 1 - (1 - level) / 2)];
}

const round = (x: number, digits: number) => Math.round(x * 10 ** digits) / 10 ** digits;

/** A metric from its samples: the median, the spread and the interval, to `digits` decimals. */
export function metricOf(samples: readonly number[], unit: string, note?: string, digits = 1): Metric {
  const [lo, hi] = medianInterval(samples);
  return {
    value: round(percentile(samples, 0.5), digits),
    unit,
    samples: samples.map((x) => round(x, digits)),
    p5: round(percentile(samples, 0.05), digits),
    p95: round(percentile(samples, 0.95), digits),
    ci: [round(lo, digits), round(hi, digits)],
    ...(note ? { note } : {}),
  };
}

/** Adds the spread and interval to a metric that has samples but was made without them. */
export function withSpread(m: Metric): Metric {
  if (!m.samples || m.samples.length < 2 || m.ci) return m;
  const digits = m.samples.some((x) => !Number.isInteger(x)) ? 2 : 1;
  const full = metricOf(m.samples, m.unit, m.note, digits);
  return { ...full, value: m.value };
}

/** The interval a goal is judged on: the bootstrap interval, else the one value. */
export function interval(m: Metric | undefined): [number, number] {
  if (!m) return [Number.NaN, Number.NaN];
  return m.ci ?? [m.value, m.value];
}

/** `a / b` as an interval: its lowest and highest values over both intervals. */
export function ratioInterval(a: Metric | undefined, b: Metric | undefined): [number, number] {
  const [al, ah] = interval(a);
  const [bl, bh] = interval(b);
  return [al / bh, ah / bl];
}

/**
 * `a / b` where the two were measured in the same rounds (sample i of each from round i, the
 * contestants alternating within it): the bootstrap interval of the median of the rounds' own
 * ratios. A slow round slows both, and its ratio carries that away, where the intervals' extremes
 * (`ratioInterval`) set the best round of one against the worst of the other. With five rounds the
 * interval is the lowest and highest round's ratio: the goal is met only when every round meets
 * it. Undefined when the samples cannot be paired (missing, or not one a round).
 */
export function pairedRatioInterval(
  a: Metric | undefined,
  b: Metric | undefined,
): { median: number; interval: [number, number] } | undefined {
  const xs = a?.samples;
  const ys = b?.samples;
  if (!xs || !ys || xs.length !== ys.length || xs.length < 2) return undefined;
  if (ys.some((y) => !(y > 0))) return undefined;
  const ratios = xs.map((x, i) => x / (ys[i] as number));
  return { median: percentile(ratios, 0.5), interval: medianInterval(ratios) };
}

/** Met only when the whole interval is at or under the goal (NaN: not measured, not met). */
export const atMost = ([, hi]: [number, number], goal: number) => hi <= goal;
/** Met only when the whole interval is at or over the goal. */
export const atLeast = ([lo]: [number, number], goal: number) => lo >= goal;

/** Fisher–Yates with the seeded generator: an order for interleaving contestants each round. */
export function shuffled<T>(xs: readonly T[], seed: number): T[] {
  const out = [...xs];
  const random = seededRandom(seed);
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [out[i], out[j]] = [out[j] as T, out[i] as T];
  }
  return out;
}
