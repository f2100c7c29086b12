/**
 * The budget of anonymous request bodies (request-bodies.ts): a count of bytes in flight with a
 * ceiling, held in the API's dependencies. A file of its own so that the dependencies' type does
 * not import the middleware that reads them.
 */

/** Bytes of anonymous bodies held at once, all routes together. */
export const ANONYMOUS_BODY_BUDGET_BYTES = 64 * 1024 * 1024;

/** A shared count of bytes in flight, with a ceiling. */
export class InFlightBytes {
  readonly limitBytes: number;
  private usedBytes = 0;

  constructor(limitBytes = ANONYMOUS_BODY_BUDGET_BYTES) {
    this.limitBytes = limitBytes;
  }

  get used(): number {
    return this.usedBytes;
  }

  /** Takes `n` bytes if they fit; false (nothing taken) when they do not. */
  take(n: number): boolean {
    if (this.usedBytes + n > this.limitBytes) return false;
    this.usedBytes += n;
    return true;
  }

  giveBack(n: number): void {
    this.usedBytes = Math.max(0, this.usedBytes - n);
  }
}
