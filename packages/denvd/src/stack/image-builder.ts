/**
 * Images built on this host for services with `build:`. The context arrives as a tar from the
 * control plane and goes straight to the engine's classic builder (which extracts it in its own
 * sandbox: denvd never unpacks a team's tar on the host). The build's output streams back as the
 * engine writes it; the image carries its build key as a label, so an unchanged build is found
 * again instead of rebuilt.
 */
import type { Readable } from "node:stream";
import { type BuildImageParams, DenvError } from "@denv/protocol";
import { BuildFailure } from "../runtime/container-runtime.ts";
import { LABEL } from "./labels.ts";
import type { StackContext } from "./stack-context.ts";

/** Lines of the build's output the result keeps (the whole log streamed as it ran). */
const LOG_TAIL_LINES = 40;
const LOG_LINE_MAX_CHARS = 400;

/** The image this host built for a build key, if it still has it. */
export function findBuiltImage(ctx: StackContext, buildKey: string): Promise<string | null> {
  return ctx.runtime.findImage({ [LABEL.buildKey]: buildKey });
}

/**
 * Removes the images built for a team's project that no version pins (`keep`) and no container
 * uses (the engine refuses those: they are reported, not forced).
 */
export async function removeBuiltImages(
  ctx: StackContext,
  p: { team_id: string; project_id: string; keep: string[] },
): Promise<{ removed: string[]; in_use: string[] }> {
  const keep = new Set(p.keep);
  const ids = await ctx.runtime.listImages({ [LABEL.team]: p.team_id, [LABEL.project]: p.project_id });
  const removed: string[] = [];
  const inUse: string[] = [];
  for (const id of ids) {
    if (keep.has(id)) continue;
    try {
      await ctx.runtime.removeImage(id);
      removed.push(id);
      ctx.log("Removed built image", { image: id, project: p.project_id });
    } catch (err) {
      if ((err as DenvError).code === "conflict") inUse.push(id);
      else if ((err as DenvError).code !== "not_found") throw err;
    }
  }
  return { removed, in_use: inUse };
}

/** Keeps the last lines of a log, each cut to a readable length and stripped of control bytes. */
export class LogTail {
  private readonly lines: string[] = [];
  private partial = "";
  steps = 0;

  push(text: string): void {
    const parts = (this.partial + text).split("\n");
    this.partial = parts.pop() ?? "";
    if (this.partial.length > LOG_LINE_MAX_CHARS * 4) {
      parts.push(this.partial);
      this.partial = "";
    }
    for (const raw of parts) {
      // eslint-style escapes: the engine's progress bars and colours are not evidence.
      // biome-ignore lint/suspicious/noControlCharactersInRegex: stripping them is the point
      const clean = raw.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "").replace(/[\x00-\x08\x0b-\x1f\x7f]/g, "");
      if (!clean.trim()) continue;
      if (/^Step \d+\/\d+ : /.test(clean)) this.steps++;
      this.lines.push(clean.length > LOG_LINE_MAX_CHARS ? `${clean.slice(0, LOG_LINE_MAX_CHARS)}…` : clean);
      if (this.lines.length > LOG_TAIL_LINES) this.lines.shift();
    }
  }

  tail(): string[] {
    return this.partial.trim() ? [...this.lines, this.partial.slice(0, LOG_LINE_MAX_CHARS)] : [...this.lines];
  }
}

/**
 * Builds one service's image. The log sink gets the engine's output as it comes; a failed step
 * is a DenvError (build_failed) whose message ends with the log's last lines.
 */
export async function buildServiceImage(
  ctx: StackContext,
  p: BuildImageParams,
  context: Readable,
  log: (text: string) => Promise<void> | void,
): Promise<{ image_id: string; ms: number; steps: number; log_tail: string[] }> {
  const t0 = performance.now();
  const tail = new LogTail();
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), p.timeout_ms);
  let logging: Promise<void> = Promise.resolve();
  try {
    const { imageId } = await ctx.runtime.buildImage(
      context,
      {
        tag: p.tag,
        dockerfile: p.dockerfile,
        args: p.args,
        target: p.target,
        cacheFrom: p.cache_from,
        noCache: p.no_cache,
        // The project's own labels cannot pose as denv's: those are set here, last.
        labels: {
          ...Object.fromEntries(Object.entries(p.labels).filter(([k]) => !k.startsWith("dev.denv."))),
          [LABEL.buildKey]: p.build_key,
          [LABEL.service]: p.service,
          ...(p.owner ? { [LABEL.team]: p.owner.team_id, [LABEL.project]: p.owner.project_id } : {}),
        },
        network: p.network,
        memoryBytes: p.memory_bytes,
      },
      (text) => {
        tail.push(text);
        // In order, and never holding the build up: a slow reader loses nothing but time.
        logging = logging.then(() => log(text)).catch(() => {});
      },
      abort.signal,
    );
    await logging;
    ctx.log("Built image", { service: p.service, image: imageId, build_key: p.build_key });
    return {
      image_id: imageId,
      ms: Math.round(performance.now() - t0),
      steps: tail.steps,
      log_tail: tail.tail(),
    };
  } catch (err) {
    await logging;
    if (err instanceof BuildFailure || abort.signal.aborted) {
      const why = abort.signal.aborted
        ? `it ran past its ${Math.round(p.timeout_ms / 1000)} s`
        : (err as Error).message;
      const last = tail.tail().slice(-8).join("\n");
      throw new DenvError("build_failed", `building ${p.service} failed: ${why}\n${last}`, {
        details: { log_tail: tail.tail(), steps: tail.steps },
      });
    }
    throw err;
  } finally {
    clearTimeout(timer);
  }
}
