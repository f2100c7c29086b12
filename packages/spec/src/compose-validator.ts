/**
 * Compose files from teams are validated off the event loop, under a time and a memory budget:
 * worker threads (a small pool, one file at a time each) with a capped heap. A file that outruns
 * the time budget, or needs more memory than the cap, is refused with compose_too_complex and its
 * worker replaced; the server's own requests never wait behind it.
 *
 * Invariant (DESIGN, trust boundaries): compose is parsed with a time and memory budget off the
 * event loop.
 */
import { Worker } from "node:worker_threads";
import type { SpecIssue } from "./issues.ts";
import type { ValidateOptions, ValidateResult } from "./validate-compose.ts";
import type { ValidateRequest } from "./validate-worker.ts";

export interface ComposeValidatorOptions {
  /** Wall-clock budget per file (default 10 s). */
  timeoutMs?: number;
  /** Heap cap of each worker, in MiB (default 256). */
  maxHeapMb?: number;
  /** Workers validating at once (default 2). */
  workers?: number;
}

interface Job {
  id: number;
  request: ValidateRequest;
  resolve: (r: ValidateResult) => void;
  reject: (err: Error) => void;
}

interface Slot {
  worker: Worker;
  job: Job | null;
  timer: NodeJS.Timeout | null;
}

const refusal = (message: string): ValidateResult => {
  const issue: SpecIssue = {
    code: "compose_too_complex",
    severity: "error",
    message,
    path: "",
    line: 0,
    column: 0,
  };
  return { ok: false, errors: [issue], warnings: [] };
};

export class ComposeValidator {
  private readonly timeoutMs: number;
  private readonly maxHeapMb: number;
  private readonly size: number;
  private readonly slots: Slot[] = [];
  private readonly queue: Job[] = [];
  private nextId = 1;
  private closed = false;

  constructor(options: ComposeValidatorOptions = {}) {
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.maxHeapMb = options.maxHeapMb ?? 256;
    this.size = Math.max(1, options.workers ?? 2);
  }

  validate(text: string, options: Omit<ValidateOptions, "readFile"> = {}): Promise<ValidateResult> {
    if (this.closed) return Promise.reject(new Error("the compose validator is closed"));
    return new Promise((resolve, reject) => {
      const id = this.nextId++;
      this.queue.push({ id, request: { id, text, options }, resolve, reject });
      this.pump();
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const job of this.queue.splice(0)) job.reject(new Error("the compose validator is closed"));
    await Promise.all(this.slots.splice(0).map((s) => this.retire(s)));
  }

  private pump(): void {
    while (this.queue.length) {
      let slot = this.slots.find((s) => s.job === null);
      if (!slot) {
        if (this.slots.length >= this.size) return;
        slot = this.spawn();
      }
      const job = this.queue.shift() as Job;
      this.run(slot, job);
    }
  }

  private spawn(): Slot {
    const worker = new Worker(new URL("./validate-worker.ts", import.meta.url), {
      resourceLimits: { maxOldGenerationSizeMb: this.maxHeapMb, maxYoungGenerationSizeMb: 32 },
    });
    // An idle worker does not keep the process alive.
    worker.unref();
    const slot: Slot = { worker, job: null, timer: null };
    worker.on("message", (msg: { id: number; result?: ValidateResult; error?: string }) => {
      const job = slot.job;
      if (!job || job.id !== msg.id) return;
      this.finish(slot);
      if (msg.result) job.resolve(msg.result);
      else job.reject(new Error(`compose validation failed: ${msg.error ?? "unknown error"}`));
      this.pump();
    });
    worker.on("error", (err: Error & { code?: string }) => {
      const job = slot.job;
      void this.retire(slot);
      if (job)
        job.resolve(
          refusal(
            err.code === "ERR_WORKER_OUT_OF_MEMORY"
              ? `checking the file needed more than ${this.maxHeapMb} MiB of memory; make it smaller`
              : `the file could not be checked: ${err.message}`,
          ),
        );
      this.pump();
    });
    worker.on("exit", () => {
      const job = slot.job;
      void this.retire(slot);
      if (job) job.resolve(refusal("the file could not be checked (its checker stopped)"));
      this.pump();
    });
    this.slots.push(slot);
    return slot;
  }

  private run(slot: Slot, job: Job): void {
    slot.job = job;
    slot.worker.ref();
    slot.timer = setTimeout(() => {
      slot.job = null;
      void this.retire(slot);
      job.resolve(
        refusal(
          `checking the file took longer than ${this.timeoutMs / 1000} s; write it out without repeating large values`,
        ),
      );
      this.pump();
    }, this.timeoutMs);
    slot.worker.postMessage(job.request);
  }

  private finish(slot: Slot): void {
    if (slot.timer) clearTimeout(slot.timer);
    slot.timer = null;
    slot.job = null;
    slot.worker.unref();
  }

  private async retire(slot: Slot): Promise<void> {
    if (slot.timer) clearTimeout(slot.timer);
    slot.timer = null;
    slot.job = null;
    const i = this.slots.indexOf(slot);
    if (i !== -1) this.slots.splice(i, 1);
    await slot.worker.terminate().catch(() => {});
  }
}
