/**
 * A live denv for the Python conformance suites: a server on SQLite and a denvd on a throw-away
 * btrfs pool (real engine, test-labelled objects), joined through a token like any host. Prints
 * one JSON line {server, api_key, run_id} when ready; stops and removes everything it made when its
 * stdin closes or it gets SIGTERM, so a dying test process never leaves it behind.
 *
 *   node test/harness/live-denv.ts
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { joinServer, Sidecar } from "@denv/denvd";
import { startServer } from "@denv/server";
import { LOCAL_REGISTRY, openTestHost } from "./test-host.ts";

const adminKey = `dk_live_${randomBytes(12).toString("hex")}`;
const dataDir = mkdtempSync(join(tmpdir(), "denv-live-"));
const host = await openTestHost({ egressProbeTarget: null });
const server = await startServer({ dataDir, adminKey, port: 0, fetchAllow: LOCAL_REGISTRY });
const token = await (
  await fetch(`${server.url}/v1/hosts/join-token`, {
    method: "POST",
    headers: { authorization: `Bearer ${adminKey}` },
  })
).json();
const joined = await joinServer(server.url, (token as { token: string }).token, "live-host");
const sidecar = new Sidecar({ serverUrl: server.url, secret: joined.secret, denvd: host.denvd });
sidecar.start();
await sidecar.ready;
process.stdout.write(`${JSON.stringify({ server: server.url, api_key: adminKey, run_id: host.runId })}\n`);

let stopping = false;
async function stop(): Promise<void> {
  if (stopping) return;
  stopping = true;
  await sidecar.stop().catch(() => {});
  await server.close().catch(() => {});
  await host.close();
  rmSync(dataDir, { recursive: true, force: true });
  process.exit(0);
}
process.stdin.on("end", stop);
process.stdin.on("close", stop);
process.stdin.resume();
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
