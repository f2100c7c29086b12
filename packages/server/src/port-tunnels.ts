/**
 * Reaching a port inside an environment from outside: `POST /v1/envs/{id}/ports/{port}` mints a URL
 * on the ports origin (ports-origin.ts, never the console's) whose token is the only credential
 * (frameworks such as OpenEnv connect with a base URL alone), stored hashed. Requests and WebSocket
 * upgrades on it are relayed as raw bytes over the host's WebSocket to denvd, which reaches the port
 * on the container's loopback through its agent. Neither denvd nor the container listens on
 * anything the world can reach. No cookie or Authorization header is passed in, and none of the
 * service's cookies come back: whatever a browser holds for denv stays out of the sandbox.
 */
import { request as httpRequest, type IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { Readable } from "node:stream";
import { DenvError } from "@denv/protocol";
import { newPortToken, type PortsOrigin } from "./ports-origin.ts";
import type { StackLifecycle } from "./targets/stack-lifecycle.ts";

export { TUNNEL_PREFIX } from "./ports-origin.ts";

import type { Store } from "./store/open-store.ts";
import { environmentPortUrls, insertPortUrl, portUrlByToken } from "./store/port-url-store.ts";

// Hop-by-hop headers (RFC 9110 7.6.1) are between the client and us, not the service.
const HOP = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "te",
  "trailer",
  "upgrade",
  "host",
]);
// Never into a sandbox: a browser's cookies for the server and any client's credentials.
const WITHHELD = new Set(["cookie", "authorization", "proxy-authorization"]);
// Never out of one, on an HTTP answer or an upgrade's: a cookie set on the ports origin would reach
// every port URL served there, and one set for a parent domain the console's origin shares would
// reach the console; Clear-Site-Data "cookies" clears every cookie of the site (eTLD+1), the
// console's session among them where it shares one.
const WITHHELD_BACK = new Set(["set-cookie", "set-cookie2", "clear-site-data"]);
/** The most an upgrade's answer head may hold before the relay gives up on it. */
const MAX_ANSWER_HEAD_BYTES = 64 * 1024;

export async function createPortUrl(
  store: Store,
  o: { teamId: string; environmentId: string; service: string | null; port: number; origin: PortsOrigin },
): Promise<{ url: string }> {
  const token = newPortToken();
  await insertPortUrl(store, { ...o, token });
  return { url: o.origin.urlFor(token) };
}

/** An environment's port URLs, without their tokens (shown once, when minted). */
export async function listPortUrls(
  store: Store,
  environmentId: string,
): Promise<{ id: string; port: number; service: string | null; created_at: string }[]> {
  return environmentPortUrls(store, environmentId);
}

/** Opens the byte stream a tunnel URL names, or says why it cannot. */
export async function openTunnel(
  store: Store,
  stacks: Pick<StackLifecycle, "openTunnel">,
  token: string,
  early = false,
  wake?: RelayOptions["wake"],
): Promise<{ stream: Duplex; port: number }> {
  let row = await portUrlByToken(store, token);
  if (!row) throw new DenvError("not_found", "no such port URL");
  if (wake && row.idle_pause_s) {
    await wake(row.environment_id);
    if (row.status === "paused") row = (await portUrlByToken(store, token)) ?? row;
  }
  if (row.status !== "running" || !row.host_id || !row.stack_id)
    throw new DenvError("unavailable", `environment ${row.name} is ${row.status}, not running`);
  const stream = await stacks.openTunnel(
    { hostId: row.host_id, stackId: row.stack_id },
    { service: row.service ?? undefined, port: row.port },
    { early },
  );
  return { stream, port: row.port };
}

/** How a relay treats a request beyond the service's port: headers to drop, limits to keep. */
export interface RelayOptions {
  /** Request headers (lowercase) never passed on, beyond the credentials always withheld. */
  withhold?: ReadonlySet<string>;
  /** X-Forwarded-Host and -Proto for the service: the name the client used. */
  forwarded?: { host: string; proto: string };
  /** A connection with no byte either way for this long is closed (default: none). */
  idleMs?: number;
  /** A connection is closed after this long whatever it carries (default: none). */
  lifetimeMs?: number;
  /**
   * x-denv.idle_pause_s: told of each request to an environment with that timer (its activity),
   * and resumes one the timer paused before the request goes on (deployments/idle-pause.ts).
   */
  wake?: (environmentId: string) => Promise<void>;
}

/** An HTTP request relayed to the service on a port URL; the answer streams back as it comes. */
export async function proxyHttp(
  store: Store,
  stacks: Pick<StackLifecycle, "openTunnel">,
  token: string,
  rest: string,
  req: Request,
  options: RelayOptions = {},
): Promise<Response> {
  // The request is written as soon as the open is sent: one round trip to the host, not two.
  return relayHttp(await openTunnel(store, stacks, token, true, options.wake), rest, req, options);
}

/** An HTTP request relayed over a tunnel already open to the service's port. */
export async function relayHttp(
  tunnel: { stream: Duplex; port: number },
  rest: string,
  req: Request,
  options: RelayOptions = {},
): Promise<Response> {
  const { stream, port } = tunnel;
  limitRelay(stream, null, options);
  const headers: Record<string, string> = {};
  req.headers.forEach((v, k) => {
    if (!HOP.has(k) && !WITHHELD.has(k) && !options.withhold?.has(k)) headers[k] = v;
  });
  headers.host = `localhost:${port}`;
  headers.connection = "close";
  if (options.forwarded) {
    headers["x-forwarded-host"] = options.forwarded.host;
    headers["x-forwarded-proto"] = options.forwarded.proto;
  }
  const body = req.body ? Readable.fromWeb(req.body as import("node:stream/web").ReadableStream) : null;
  const res = await new Promise<IncomingMessage>((resolve, reject) => {
    const out = httpRequest({
      method: req.method,
      path: rest,
      headers,
      createConnection: () => stream as unknown as import("node:net").Socket,
    });
    out.once("response", resolve);
    out.once("error", (err) =>
      reject(new DenvError("unavailable", `the service on port ${port} did not answer: ${err.message}`)),
    );
    if (body) body.pipe(out);
    else out.end();
  });
  const outHeaders = new Headers();
  for (const [k, v] of Object.entries(res.headers)) {
    if (HOP.has(k) || WITHHELD_BACK.has(k) || v === undefined) continue;
    for (const one of Array.isArray(v) ? v : [v]) outHeaders.append(k, one);
  }
  // The service's page may not hold on to a window that opened it (or that it opens).
  outHeaders.set("cross-origin-opener-policy", "same-origin");
  const status = res.statusCode ?? 502;
  const noBody = req.method === "HEAD" || status === 204 || status === 304;
  return new Response(noBody ? null : (Readable.toWeb(res) as ReadableStream), {
    status,
    headers: outHeaders,
  });
}

/** A WebSocket (or any) upgrade on a tunnel URL: the raw connection is spliced to the service. */
export async function proxyUpgrade(
  store: Store,
  stacks: Pick<StackLifecycle, "openTunnel">,
  origin: PortsOrigin,
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  options: RelayOptions = {},
): Promise<void> {
  const parts = origin.route(req.headers.host, req.url ?? "");
  if (!parts) return refuseUpgrade(socket, 404);
  let tunnel: Awaited<ReturnType<typeof openTunnel>>;
  try {
    tunnel = await openTunnel(store, stacks, parts.token, false, options.wake);
  } catch (err) {
    return refuseUpgrade(socket, err instanceof DenvError ? err.httpStatus : 502);
  }
  relayUpgrade(tunnel, parts.rest, req, socket, head, options);
}

/** Ends an upgrade request with a status and nothing else. */
export function refuseUpgrade(socket: Duplex, status: number): void {
  const text = status === 404 ? "Not Found" : status === 401 ? "Unauthorized" : "Service Unavailable";
  socket.end(`HTTP/1.1 ${status} ${text}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
}

/** Splices an upgrade request onto a tunnel already open to the service's port. */
export function relayUpgrade(
  tunnel: { stream: Duplex; port: number },
  rest: string,
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  options: RelayOptions = {},
): void {
  const { stream, port } = tunnel;
  let text = `${req.method} ${rest} HTTP/1.1\r\nHost: localhost:${port}\r\n`;
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const k = (req.rawHeaders[i] as string).toLowerCase();
    if (k === "host" || WITHHELD.has(k) || options.withhold?.has(k) || k.startsWith("x-forwarded-")) continue;
    // A header's value never carries a line break (Node refuses them), so it cannot add a header.
    text += `${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}\r\n`;
  }
  if (options.forwarded)
    text += `X-Forwarded-Host: ${options.forwarded.host}\r\nX-Forwarded-Proto: ${options.forwarded.proto}\r\n`;
  stream.write(`${text}\r\n`);
  if (head.length) stream.write(head);
  const close = () => {
    socket.destroy();
    stream.destroy();
  };
  socket.on("error", close);
  stream.on("error", close);
  socket.on("close", close);
  stream.on("close", close);
  socket.pipe(stream);
  // The service's answer (its 101, or a refusal) is an HTTP answer like any other: its head is read
  // whole and its headers filtered as relayHttp's are, before the connection is spliced.
  let got: Buffer = Buffer.alloc(0);
  const onHead = (chunk: Buffer) => {
    got = got.length ? Buffer.concat([got, chunk]) : chunk;
    const end = got.indexOf("\r\n\r\n");
    if (end === -1) {
      if (got.length > MAX_ANSWER_HEAD_BYTES) close();
      return;
    }
    stream.off("data", onHead);
    socket.write(filteredAnswerHead(got.subarray(0, end + 4)));
    if (got.length > end + 4) socket.write(got.subarray(end + 4));
    stream.pipe(socket);
  };
  stream.on("data", onHead);
  limitRelay(stream, socket, options);
}

/** An answer's head with the headers no service may send a browser through denv taken out. */
export function filteredAnswerHead(head: Buffer): Buffer {
  const lines = head.toString("latin1").split("\r\n");
  const kept = lines.filter((line, i) => {
    if (i === 0 || line === "") return true;
    const name = line.slice(0, line.indexOf(":")).trim().toLowerCase();
    return !WITHHELD_BACK.has(name);
  });
  return Buffer.from(kept.join("\r\n"), "latin1");
}

/**
 * Closes a relayed connection that sits idle (no byte either way) past idleMs, or lives past
 * lifetimeMs: a forgotten WebSocket or stream does not hold a tunnel to a host forever.
 */
function limitRelay(stream: Duplex, socket: Duplex | null, options: RelayOptions): void {
  const { idleMs, lifetimeMs } = options;
  if (!idleMs && !lifetimeMs) return;
  let last = Date.now();
  const seen = () => {
    last = Date.now();
  };
  stream.on("data", seen);
  socket?.on("data", seen);
  const end = () => {
    socket?.destroy();
    stream.destroy();
  };
  let idleTimer: NodeJS.Timeout | undefined;
  const lifeTimer = lifetimeMs ? setTimeout(end, lifetimeMs).unref() : undefined;
  if (idleMs) {
    const check = () => {
      const quiet = Date.now() - last;
      if (quiet >= idleMs) return end();
      idleTimer = setTimeout(check, idleMs - quiet).unref();
    };
    idleTimer = setTimeout(check, idleMs).unref();
  }
  stream.once("close", () => {
    clearTimeout(idleTimer);
    clearTimeout(lifeTimer);
  });
}
