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
}

export const DEFAULT_RATE_LIMIT: RateLimitOptions = { perSecond: 2000, burst: 4000 };

/**
 * Per client address for what has no key: sign-up, sign-in, device codes and their polls. A burst
 * of 60, then one every half second: a person (and a CLI polling every 2 s) never meets it; a
 * password guesser gets 2 a second.
 */
export const ANONYMOUS_RATE_LIMIT: RateLimitOptions = { perSecond: 2, burst: 60 };

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
  take(key: string, cost = 1, nowMs = performance.now()): { ok: true } | { ok: false; retryAfterMs: number } {
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
