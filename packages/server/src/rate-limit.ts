/**
 * Per-key rate limits: a token bucket for each API key, refilled continuously. A key that spends
 * its burst waits for tokens (429 rate_limited with Retry-After), and never slows another key.
 * The defaults leave room for RL-scale work on one key (thousands of execs a second); they stop
 * a runaway or hostile client from taking the whole server.
 */
export interface RateLimitOptions {
  /** Requests a key may make per second, sustained. */
  perSecond: number;
  /** Requests a key may make at once after being idle. */
  burst: number;
  /** Milliseconds on a monotonic clock (default performance.now; tests drive their own). */
  clock?: () => number;
}

export const DEFAULT_RATE_LIMIT: RateLimitOptions = { perSecond: 2000, burst: 4000 };

/**
 * Per client address for what has no key: sign-up, sign-in, device codes and their polls. A burst
 * of 60, then one every half second: a person (and a CLI polling every 2 s) never meets it; a
 * password guesser gets 2 a second.
 */
export const ANONYMOUS_RATE_LIMIT: RateLimitOptions = { perSecond: 2, burst: 60 };

/**
 * Per account (an email signed in to or signed up with, a person looking up device codes), whatever
 * address the attempts come from: a guesser with many addresses still gets 20, then one each 5 s.
 */
export const ACCOUNT_RATE_LIMIT: RateLimitOptions = { perSecond: 0.2, burst: 20 };

/**
 * The bucket a client address counts in: an IPv4 address itself, an IPv6 address by its /64 (one
 * subscriber's or one machine's usual allocation: counting each address would give whoever holds a
 * /64 unlimited tries). IPv4-mapped IPv6 addresses count as their IPv4 address.
 */
export function clientBucketOf(address: string): string {
  const a = address
    .trim()
    .toLowerCase()
    .replace(/^\[|\]$/g, "")
    .replace(/%.*$/, "");
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(a);
  if (mapped) return mapped[1] as string;
  if (!a.includes(":")) return a;
  // Expand "::" and keep the first four groups.
  const [head = "", tail] = a.split("::", 2) as [string, string | undefined];
  const h = head ? head.split(":") : [];
  const t = tail ? tail.split(":") : [];
  if (t.at(-1)?.includes(".")) t.splice(-1, 1, "0", "0"); // an embedded IPv4 tail is within the /64's host half
  const groups =
    tail === undefined ? h : [...h, ...Array(Math.max(0, 8 - h.length - t.length)).fill("0"), ...t];
  return `${groups
    .slice(0, 4)
    .map((g) => (Number.parseInt(g || "0", 16) || 0).toString(16))
    .join(":")}::/64`;
}

/** Buckets kept at most (the idle ones are dropped first: a full bucket is the same as none). */
const MAX_BUCKETS = 100_000;

interface Bucket {
  tokens: number;
  at: number;
}

export class RateLimiter {
  private readonly options: RateLimitOptions;
  private readonly buckets = new Map<string, Bucket>();

  constructor(options: RateLimitOptions = DEFAULT_RATE_LIMIT) {
    this.options = options;
  }

  /** Takes `cost` tokens from the key's bucket; when it cannot, says how long until it could. */
  take(
    key: string,
    cost = 1,
    nowMs = (this.options.clock ?? performance.now.bind(performance))(),
  ): { ok: true } | { ok: false; retryAfterMs: number } {
    const { perSecond, burst } = this.options;
    let b = this.buckets.get(key);
    if (!b) {
      if (this.buckets.size >= MAX_BUCKETS) this.dropIdle(nowMs);
      b = { tokens: burst, at: nowMs };
      this.buckets.set(key, b);
    }
    b.tokens = Math.min(burst, b.tokens + ((nowMs - b.at) / 1000) * perSecond);
    b.at = nowMs;
    if (b.tokens >= cost) {
      b.tokens -= cost;
      return { ok: true };
    }
    return { ok: false, retryAfterMs: Math.ceil(((cost - b.tokens) / perSecond) * 1000) };
  }

  private dropIdle(nowMs: number): void {
    const { perSecond, burst } = this.options;
    for (const [k, b] of this.buckets)
      if (b.tokens + ((nowMs - b.at) / 1000) * perSecond >= burst) this.buckets.delete(k);
    // Still full of busy keys: the oldest go.
    for (const k of this.buckets.keys()) {
      if (this.buckets.size < MAX_BUCKETS) break;
      this.buckets.delete(k);
    }
  }
}
