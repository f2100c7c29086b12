/**
 * The agent is never root: resolve refuses every spelling of uid 0, and here the real uids of the
 * agent service's process are read back from the kernel (/proc on the host, not the container's
 * files), because a user name can map to uid 0 in the image's own passwd.
 */
import { readFile } from "node:fs/promises";
import { DenvError } from "@denv/protocol";
import { AGENT_BIN } from "./container-spec.ts";
import { type StackContext, sleep } from "./stack-context.ts";
import type { StackRecord } from "./state-store.ts";

/** How long the agent may take to become the service's command (longer on a loaded machine). */
const BECOME_COMMAND_MS = 30_000;

export async function assertAgentNotRoot(ctx: StackContext, stack: StackRecord): Promise<void> {
  const svc = stack.spec.agent?.service;
  const id = svc ? stack.containers[svc] : undefined;
  if (!svc || !id || stack.spec.kind !== "rl-environment") return;
  const st = await ctx.runtime.inspectContainer(id);
  if (!st.running || st.pid <= 0) return;
  // The service's process: the container's first (or, under docker's init, the init's child), once
  // the agent that started it has become the service's command; until then the process is still
  // the agent, as root. A process that cannot be read is looked up again.
  const deadline = performance.now() + BECOME_COMMAND_MS;
  let uids: number[] | null = null;
  while (uids === null) {
    if (performance.now() > deadline)
      throw new DenvError("timeout", `the agent service ${svc} did not start its command within 30 s`);
    let pid = st.pid;
    if (stack.spec.services[svc]?.init) {
      const kids = await readFile(`/proc/${pid}/task/${pid}/children`, "utf8").catch(() => "");
      pid = Number(kids.trim().split(/\s+/)[0]) || pid;
    }
    const argv0 = (await readFile(`/proc/${pid}/cmdline`, "utf8").catch(() => "")).split("\0")[0];
    const status = await readFile(`/proc/${pid}/status`, "utf8").catch(() => "");
    const m = /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/m.exec(status);
    if (m && argv0 && argv0 !== AGENT_BIN) uids = m.slice(1).map(Number);
    else {
      const again = await ctx.runtime.inspectContainer(id);
      if (!again.running) return; // it exited: start or health says so
      await sleep(50);
    }
  }
  if (uids.includes(0)) {
    throw new DenvError(
      "forbidden",
      `the agent service ${svc} runs as uid 0 (user: ${stack.spec.services[svc]?.user ?? "the image's"}); the agent must never be root: set user: to a non-root uid (e.g. "1000:1000")`,
    );
  }
}
