/**
 * An E2B sandbox's pause and resume, shared by its routes (pause, connect), the timeout sweep (a
 * sandbox made with `autoPause` is paused at its timeout, not killed) and envd's calls (one made
 * with `autoResume` is resumed by the next call that reaches it). Every step goes through /v1 as
 * the acting key, so the key's role and team are checked there as for any call.
 *
 * Pause: the sandbox snapshotted (a denv version) and, with `memory` (E2B's default), every
 * process checkpointed to disk and stopped (denv's pause that keeps memory): resuming carries them
 * on. Without `memory`, or where the processes cannot be checkpointed (no CRIU, io_uring, a
 * command's open channel, another user's process where root lacks CAP_SYS_RESOURCE and denv's
 * CRIU limits reader was not built), every service is stopped instead and resuming restores the
 * version and starts them again.
 */
import { updateE2bSandbox } from "../store/e2b-store.ts";
import type { Store } from "../store/open-store.ts";
import type { E2bSandboxesTable } from "../store/schema.ts";
import { ConnectError } from "./connect-protocol.ts";
import { fromDenvCode } from "./envd-processes.ts";

type V1Call = (keyId: string, path: string, init?: RequestInit) => Promise<Response>;

export interface PauseDeps {
  store: Store;
  v1: V1Call;
  nowMs: () => number;
  /** Ends the sandbox's command streams (they do not outlive its processes). */
  dropStreams(envId: string): void;
}

/** A /v1 answer's JSON, or its refusal as E2B's error with the words it answered. */
async function answered(res: Response): Promise<Record<string, unknown>> {
  const body = (await res.json().catch(() => ({}))) as Record<string, unknown>;
  if (!res.ok) {
    const e = (body.error ?? {}) as { code?: string; message?: string };
    throw fromDenvCode(e.code, e.message ?? `HTTP ${res.status}`);
  }
  return body;
}

export async function pauseSandbox(
  deps: PauseDeps,
  s: E2bSandboxesTable,
  keyId: string,
  options: { memory: boolean },
): Promise<void> {
  const env = `/v1/envs/${s.environment_id}`;
  await answered(await deps.v1(keyId, `${env}/snapshot`, { method: "POST" }));
  const info = await answered(await deps.v1(keyId, env));
  deps.dropStreams(s.environment_id);
  const pausedAt = { paused_version_id: info.current_version_id as string };
  if (options.memory) {
    const kept = await deps.v1(keyId, `${env}/pause`, { method: "POST" });
    if (kept.ok) {
      await updateE2bSandbox(deps.store, s.environment_id, pausedAt);
      return;
    }
    // A pause that kept nothing left every process as it was: one the processes cannot take falls
    // back to stopping them; a refusal of the caller is said.
    const refused = await answered(kept).catch((err: ConnectError) => err);
    if (
      refused instanceof ConnectError &&
      ["permission_denied", "unauthenticated", "not_found"].includes(refused.code)
    )
      throw refused;
  }
  for (const service of info.services as string[])
    await answered(
      await deps.v1(keyId, `${env}/services/${encodeURIComponent(service)}/stop`, { method: "POST" }),
    );
  await updateE2bSandbox(deps.store, s.environment_id, pausedAt);
}

/**
 * A paused sandbox running again under the same id, its timeout starting anew: its processes
 * carry on where they were paused with their memory, else its version is restored and started.
 */
export async function resumeSandbox(
  deps: PauseDeps,
  s: E2bSandboxesTable,
  keyId: string,
  timeoutS: number,
): Promise<void> {
  const env = `/v1/envs/${s.environment_id}`;
  const status = (await answered(await deps.v1(keyId, env))).status;
  // Paused with its memory: its processes carry on. Where they cannot be restored, the version
  // the pause took is, as after a pause without memory.
  const resumed = status === "paused" && (await deps.v1(keyId, `${env}/resume`, { method: "POST" })).ok;
  if (!resumed && s.paused_version_id) {
    const d = await answered(
      await deps.v1(keyId, `${env}/rollback?wait=true`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ version: s.paused_version_id }),
      }),
    );
    if (d.status !== "succeeded")
      throw new ConnectError("internal", `the sandbox could not be resumed: ${String(d.reason ?? d.status)}`);
  }
  await updateE2bSandbox(deps.store, s.environment_id, {
    end_at_ms: deps.nowMs() + timeoutS * 1000,
    paused_version_id: null,
  });
}
