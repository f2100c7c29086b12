/**
 * Build contexts between replicas. Each replica keeps the contexts uploaded to it on its own disk
 * (build-contexts.ts); a deploy on another replica that needs one fetches it from the replica that
 * has it, over plain HTTP on the API's port with the link key. What arrives is stored only if its
 * sha256 is the digest it was asked for, so a replica cannot be handed other bytes.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as WebReadableStream } from "node:stream/web";
import type { BuildContexts } from "../build-contexts.ts";
import { constantTimeEqual } from "./link-key.ts";
import type { ReplicaRegistry } from "./replica-registry.ts";

export const CONTEXTS_PATH = "/v1/replicas/contexts/";
const FETCH_TIMEOUT_MS = 10 * 60_000;
const CONTEXT_URL = /^\/v1\/replicas\/contexts\/([a-z]+_[0-9a-zA-Z]+)\/(sha256:[0-9a-f]{64})$/;

/** Answers another replica's GET for a context this one holds. */
export async function servePeerContext(
  req: IncomingMessage,
  res: ServerResponse,
  contexts: BuildContexts,
  key: string,
): Promise<void> {
  const given = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1] ?? "";
  const m = CONTEXT_URL.exec(req.url ?? "");
  const status = req.method !== "GET" ? 405 : !constantTimeEqual(given, key) ? 401 : !m ? 404 : 200;
  const size = status === 200 && m ? await contexts.storedSize(m[1] as string, m[2] as string) : null;
  if (status !== 200 || size === null || !m) {
    res.writeHead(status === 200 ? 404 : status, { "content-length": "0" }).end();
    return;
  }
  res.writeHead(200, { "content-type": "application/x-tar", "content-length": String(size) });
  await pipeline(contexts.open(m[1] as string, m[2] as string), res).catch(() => res.destroy());
}

/** Where BuildContexts looks for a context it does not hold: each live peer that has it, in turn. */
export function contextsFromPeers(
  registry: ReplicaRegistry,
  key: string,
): (teamId: string, digest: string) => AsyncIterable<Readable> {
  return async function* (teamId, digest) {
    for (const peer of await registry.peers().catch(() => [])) {
      let res: Response;
      try {
        res = await fetch(new URL(`${CONTEXTS_PATH}${teamId}/${digest}`, peer.url), {
          headers: { authorization: `Bearer ${key}` },
          signal: AbortSignal.timeout(FETCH_TIMEOUT_MS),
        });
      } catch {
        continue; // that peer is gone or slow: the next one
      }
      if (res.ok && res.body) yield Readable.fromWeb(res.body as WebReadableStream<Uint8Array>);
      else await res.body?.cancel();
    }
  };
}
