/**
 * Operations running or done on this host, by id, so that one the server sends again after a
 * reconnect is answered from the run already made (never run twice). Finished results are kept
 * within a byte budget (a file read can be 100 MiB), oldest out first, the newest always kept; an
 * evicted one is remembered by id only, so a late re-send is answered with an error instead of
 * running again.
 */
export interface OpResultCacheOptions {
  maxBytes: number;
  maxCount: number;
  /** Ids of evicted results remembered. */
  maxForgotten: number;
}

export const DEFAULT_OP_CACHE: OpResultCacheOptions = {
  maxBytes: 64 * 1024 * 1024,
  maxCount: 2000,
  maxForgotten: 20_000,
};

export class OpResultCache<T> {
  private readonly options: OpResultCacheOptions;
  private readonly runs = new Map<string, Promise<T>>();
  private readonly finished: { opId: string; bytes: number }[] = [];
  private finishedBytes = 0;
  private readonly forgottenIds = new Set<string>();

  constructor(options: OpResultCacheOptions = DEFAULT_OP_CACHE) {
    this.options = options;
  }

  /** The run of an operation under way or kept. */
  get(opId: string): Promise<T> | undefined {
    return this.runs.get(opId);
  }

  /** Whether the operation ran but its result is no longer kept. */
  forgotten(opId: string): boolean {
    return this.forgottenIds.has(opId);
  }

  /** Ids of operations under way or kept (the hello's known_ops). */
  ids(): string[] {
    return [...this.runs.keys()];
  }

  /** Records a run; once it settles, its result counts against the budget. */
  add(opId: string, run: Promise<T>, sizeOf: (result: T) => number): void {
    this.runs.set(opId, run);
    void run.then((r) => this.keep(opId, sizeOf(r)));
  }

  /** Bytes of finished results kept. */
  get bytes(): number {
    return this.finishedBytes;
  }

  private keep(opId: string, bytes: number): void {
    const { maxBytes, maxCount, maxForgotten } = this.options;
    this.finished.push({ opId, bytes });
    this.finishedBytes += bytes;
    while (this.finished.length > 1 && (this.finishedBytes > maxBytes || this.finished.length > maxCount)) {
      const old = this.finished.shift() as { opId: string; bytes: number };
      this.finishedBytes -= old.bytes;
      this.runs.delete(old.opId);
      this.forgottenIds.add(old.opId);
      if (this.forgottenIds.size > maxForgotten)
        this.forgottenIds.delete(this.forgottenIds.values().next().value as string);
    }
  }
}
