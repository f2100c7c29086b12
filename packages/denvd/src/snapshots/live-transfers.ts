/**
 * A live version's process images moving to another host beside its volumes (version-transfers.ts):
 * each service's directory (CRIU's images and its container layer) as a tar, counted at both ends;
 * the receiving host checks the tar (nothing lands outside the directory, no link is followed: the
 * sending host is not trusted), stages it, and adopt_version then checks each service's digest
 * against the version's record before the images join the version. A host whose CPU lacks a flag
 * the processes were taken with keeps the version disk-only (cpu-flags.ts says why).
 */
import { mkdir, rename, rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { DenvError } from "@denv/protocol";
import type { LiveRecord } from "../host/state-store.ts";
import type { StackContext } from "../stack/stack-context.ts";
import { extractTarInto, tarOf } from "../storage/snapshot-streams.ts";
import { assertSafeId } from "../storage/storage-driver.ts";
import { hostCpuFlags, missingCpuFlags } from "./cpu-flags.ts";
import { liveDigest, liveDir } from "./live-capture.ts";
import { digestTree } from "./volume-digest.ts";

/** Where another host's process images wait for adopt_version (removed at every open). */
export const liveIncomingDir = (ctx: StackContext) => join(ctx.options.stateDir, "live-incoming");
/** A service's staging: its name (and the version's id) checked as one path segment each. */
function incoming(ctx: StackContext, versionId: string, service: string): string {
  assertSafeId(versionId);
  assertSafeId(service);
  return join(liveIncomingDir(ctx), versionId, service);
}

/** One service's process images as a tar, into `out`. */
export async function sendLive(ctx: StackContext, versionId: string, service: string, out: Writable) {
  const v = ctx.version(versionId);
  if (!v.live || !Object.hasOwn(v.live.services, service))
    throw new DenvError("not_found", `version ${versionId} holds no processes of service ${service}`);
  const send = tarOf(join(liveDir(ctx, versionId), service));
  try {
    await pipeline(send.stream, out);
  } catch (err) {
    send.cancel();
    throw new DenvError(
      "unavailable",
      `sending ${service}'s process images stopped: ${(err as Error).message}`,
      {
        cause: err,
      },
    );
  }
  await send.done;
}

/** Another host's process images of one service, checked and staged (an earlier staging replaced). */
export async function receiveLive(
  ctx: StackContext,
  versionId: string,
  service: string,
  input: Readable,
): Promise<void> {
  if (ctx.store.version(versionId)?.live?.services[service])
    throw new DenvError("conflict", `this host already holds service ${service}'s processes of ${versionId}`);
  const dir = incoming(ctx, versionId, service);
  await rm(dir, { recursive: true, force: true });
  await mkdir(dirname(dir), { recursive: true, mode: 0o700 });
  await mkdir(dir, { mode: 0o700 });
  try {
    await extractTarInto(input, dir);
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

/**
 * The staged process images joined to the version being adopted: each service's digest checked
 * against the record (a mismatch refuses the whole adoption); a CPU that lacks a flag they were
 * taken with leaves them out, saying why. Answers the services now held, and the refusal.
 */
export async function adoptLive(
  ctx: StackContext,
  versionId: string,
  live: LiveRecord,
): Promise<{ kept: LiveRecord | null; refused?: string }> {
  const services = Object.keys(live.services);
  for (const svc of services) {
    const want = live.services[svc]?.digest;
    const found = await digestTree(incoming(ctx, versionId, svc))
      .then((d) => `sha256:${d.digest}`)
      .catch((err: Error) => `unreadable (${err.message})`);
    if (!want || found !== want)
      throw new DenvError(
        "storage_error",
        `service ${svc}'s process images of ${versionId} arrived as ${found}, recorded as ${want ?? "no digest"}: not adopted`,
      );
  }
  const missing = missingCpuFlags(live.cpuFlags, await hostCpuFlags());
  if (missing.length) {
    await discardLive(ctx, versionId);
    return {
      kept: null,
      refused: `this host's CPU lacks ${missing.slice(0, 8).join(", ")}, which the processes were taken with: the version is kept disk-only here`,
    };
  }
  await mkdir(liveDir(ctx, versionId), { recursive: true, mode: 0o700 });
  for (const svc of services) await rename(incoming(ctx, versionId, svc), join(liveDir(ctx, versionId), svc));
  await rm(join(liveIncomingDir(ctx), versionId), { recursive: true, force: true });
  // Checked again where they now are: what a fork's restore will read.
  for (const svc of services)
    if ((await liveDigest(ctx, versionId, svc)) !== live.services[svc]?.digest)
      throw new DenvError("storage_error", `service ${svc}'s process images changed while adopted`);
  return { kept: live };
}

/** A version's staged process images thrown away. Idempotent. */
export async function discardLive(ctx: StackContext, versionId: string): Promise<void> {
  assertSafeId(versionId);
  await rm(join(liveIncomingDir(ctx), versionId), { recursive: true, force: true });
}
