/**
 * The agent is never root: resolve refuses every spelling of uid 0, and here the real uids of the
 * agent service's process are read back from the kernel (/proc on the host, not the container's
 * files), because a user name can map to uid 0 in the image's own passwd.
 */
import { readFile } from "node:fs/promises";
import { DenvError } from "@denv/protocol";
import type { StackRecord } from "../host/state-store.ts";
import { type StackContext, sleep } from "../stack/stack-context.ts";
import { processChildren } from "./process-children.ts";
import { isServiceStarter } from "./service-starter.ts";

/** How long the agent may take to become the service's command (longer on a loaded machine). */
const BECOME_COMMAND_MS = 30_000;

export async function assertAgentNotRoot(ctx: StackContext, stack: StackRecord): Promise<void> {
  const svc = stack.spec.agent?.service;
  const id = svc ? stack.containers[svc] : undefined;
  if (!svc || !id || stack.spec.kind !== "rl-environment") return;
  const deadline = performance.now() + BECOME_COMMAND_MS;
  for (;;) {
    const st = await ctx.runtime.inspectContainer(id);
    if (!st.running || st.pid <= 0) return; // not running: start or health says so
    const read = await serviceUids(ctx, stack, svc, id, st.pid, deadline);
    if (!read?.uids.includes(0)) return;
    // Root, and still root a moment later in the same container: refused. A reading taken while
    // the container was being replaced proves nothing either way, so it is taken again.
    if (await stillRoot(ctx, id, st.pid, read.pid))
      throw new DenvError(
        "forbidden",
        `the agent service ${svc} runs as uid 0 (user: ${stack.spec.services[svc]?.user ?? "the image's"}); the agent must never be root: set user: to a non-root uid (e.g. "1000:1000")`,
      );
  }
}

/**
 * The uids of the service's process: the container's first (or, under docker's init, the init's
 * child), once the engine's init and then the agent that started it have become the service's
 * command; until then the process is one of them, as root. Null when the container stopped meanwhile.
 */
async function serviceUids(
  ctx: StackContext,
  stack: StackRecord,
  svc: string,
  id: string,
  first: number,
  deadline: number,
): Promise<{ uids: number[]; pid: number } | null> {
  for (;;) {
    if (performance.now() > deadline)
      throw new DenvError("timeout", `the agent service ${svc} did not start its command within 30 s`);
    let pid = first;
    if (stack.spec.services[svc]?.init) {
      // Under docker's init the service is its child; until the init has started it there is
      // nothing to read (the init itself is root, and is not the service).
      pid = (await processChildren(pid))[0] ?? 0;
    }
    const argv = pid ? await processArgv(pid) : [];
    const status = pid ? await readFile(`/proc/${pid}/status`, "utf8").catch(() => "") : "";
    const m = /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/m.exec(status);
    if (m && argv[0] && !isServiceStarter(argv)) return { uids: m.slice(1).map(Number), pid };
    const again = await ctx.runtime.inspectContainer(id);
    if (!again.running) return null;
    await sleep(50);
  }
}

/**
 * A root reading confirmed: the same container, with the same first process, still not the agent
 * and still uid 0 a moment later. A process read while its container was being replaced (its pid
 * gone, or taken by another) is not evidence either way.
 */
async function stillRoot(ctx: StackContext, id: string, first: number, pid: number): Promise<boolean> {
  await sleep(200);
  const again = await ctx.runtime.inspectContainer(id);
  if (!again.running || again.pid !== first) return false;
  const argv = await processArgv(pid);
  if (!argv[0] || isServiceStarter(argv)) return false;
  const status = await readFile(`/proc/${pid}/status`, "utf8").catch(() => "");
  const m = /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/m.exec(status);
  return m?.slice(1).map(Number).includes(0) ?? false;
}

/** A process's argv from /proc (empty when it is gone). */
async function processArgv(pid: number): Promise<string[]> {
  return (await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "")).split("\0");
}
