/**
 * Bytes of an HTTP request and answer: request bodies read as streams with their limit counted as
 * they come (never buffered whole), answers streamed, and exec's stream form split into its request
 * and stdin. (Running a command over a host's byte streams is host-exec.ts.)
 */
import { IncomingMessage, ServerResponse } from "node:http";
import { Readable, Transform, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { ReadableStream as WebReadable } from "node:stream/web";
import { DenvError, handOver, releaseHandedOver } from "@denv/protocol";
import { RESPONSE_ALREADY_SENT } from "@hono/node-server/utils/response";
import type { ApiContext } from "./api-deps.ts";

/** The request's body as a stream, failing with payload_too_large past `limitBytes`. */
export function requestBody(c: ApiContext, limitBytes: number): Readable {
  const declared = Number(c.req.header("content-length") ?? Number.NaN);
  const tooLarge = () =>
    new DenvError(
      "payload_too_large",
      `the request body is over ${limitBytes} bytes (${Math.round(limitBytes / 1024 ** 3)} GiB); send less at a time`,
    );
  if (Number.isFinite(declared) && declared > limitBytes) throw tooLarge();
  let seen = 0;
  // Under the Node server the request itself is read: no detour through a web stream.
  // (c.req.raw.body is not touched then: reading it would start a second reader on the request.)
  const { incoming } = nodeBindings(c);
  const counter = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      seen += chunk.length;
      if (seen > limitBytes) cb(tooLarge());
      // Node's parser copies each body chunk out of its read buffer, so a chunk is the body's alone:
      // handed over, it is freed by the stream that sends it on instead of by the collector.
      else cb(null, incoming ? handOver(chunk) : chunk);
    },
  });
  const source = incoming ?? webBody(c);
  source.on("error", (err) => counter.destroy(err));
  return source.pipe(counter);
}

function webBody(c: ApiContext): Readable {
  const web = c.req.raw.body;
  return web ? Readable.fromWeb(web as WebReadable<Uint8Array>) : Readable.from([]);
}

/** The Node request and response behind a request, when it came through the Node server. */
export function nodeBindings(c: ApiContext): { incoming?: IncomingMessage; outgoing?: ServerResponse } {
  const env = c.env as { incoming?: unknown; outgoing?: unknown } | undefined;
  return {
    ...(env?.incoming instanceof IncomingMessage ? { incoming: env.incoming } : {}),
    ...(env?.outgoing instanceof ServerResponse ? { outgoing: env.outgoing } : {}),
  };
}

/**
 * Answers with a stream of bytes: written straight to the Node response when there is one (the
 * web-stream detour costs a copy and a promise per chunk), else as a web stream.
 */
export function streamResponse(c: ApiContext, body: Readable, contentType: string): Response {
  const { outgoing } = nodeBindings(c);
  // (The stream's async iterator, not Readable.toWeb: a stream already failed must fail the answer.)
  if (!outgoing)
    return c.body(ReadableStream.from(body as AsyncIterable<Uint8Array>), 200, {
      "content-type": contentType,
    });
  outgoing.writeHead(200, { "content-type": contentType });
  // A failure mid-way cuts the response: the client sees a transfer that did not finish.
  pipeline(body, releasingSink(outgoing)).catch(() => outgoing.destroy());
  return RESPONSE_ALREADY_SENT;
}

/**
 * Writes to the response and frees each handed-over chunk (a host's frame) once the socket took
 * it: a GiB answered is a thousand frames, otherwise left for the collector.
 */
export function releasingSink(out: ServerResponse): Writable {
  let drained: (() => void) | null = null;
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      if (out.write(chunk, () => releaseHandedOver(chunk))) cb();
      else drained = () => cb();
    },
    final(cb) {
      out.end(() => cb());
    },
    destroy(err, cb) {
      if (err) out.destroy();
      cb(err);
    },
  });
  out.on("drain", () => {
    const d = drained;
    drained = null;
    d?.();
  });
  // The client went away before the end: the body stops being read.
  out.on("close", () => {
    if (!out.writableFinished) sink.destroy(new Error("the client closed the connection"));
  });
  return sink;
}

/**
 * Splits exec's stream form: the exec request on the first line (at most `maxLineBytes`), then
 * stdin to the end of the body.
 */
export async function splitExecStream(
  body: Readable,
  maxLineBytes: number,
): Promise<{ request: unknown; stdin: Readable }> {
  const parts: Buffer[] = [];
  let size = 0;
  const iterator = body[Symbol.asyncIterator]();
  for (;;) {
    const next = await iterator.next();
    if (next.done) break;
    const chunk = next.value as Buffer;
    const nl = chunk.indexOf(10);
    if (nl < 0) {
      parts.push(chunk);
      size += chunk.length;
      if (size > maxLineBytes)
        throw new DenvError(
          "invalid_argument",
          `the exec request must be the body's first line, at most ${maxLineBytes} bytes, ended by a newline`,
        );
      continue;
    }
    if (size + nl > maxLineBytes)
      throw new DenvError(
        "invalid_argument",
        `the exec request must be the body's first line, at most ${maxLineBytes} bytes, ended by a newline`,
      );
    parts.push(chunk.subarray(0, nl));
    const rest = chunk.subarray(nl + 1);
    let request: unknown;
    try {
      request = JSON.parse(Buffer.concat(parts).toString("utf8"));
    } catch {
      throw new DenvError("invalid_argument", "the body's first line is not the exec request as JSON");
    }
    async function* stdin() {
      if (rest.length) yield rest;
      for (;;) {
        const n = await iterator.next();
        if (n.done) return;
        yield n.value as Buffer;
      }
    }
    return { request, stdin: Readable.from(stdin(), { objectMode: false }) };
  }
  throw new DenvError("invalid_argument", "the body has no newline after the exec request");
}
