import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { test } from "node:test";
import { handOver } from "@denv/protocol";
import { releasingSink } from "./host-bytes.ts";

async function serve(handler: Parameters<typeof createServer>[1]): Promise<[Server, string]> {
  const server = createServer(handler);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return [server, `http://127.0.0.1:${(server.address() as AddressInfo).port}/`];
}

test("an answer frees handed-over chunks once written, leaves the rest, and every byte arrives", async () => {
  const given = [1, 2, 3].map((i) => handOver(Buffer.alloc(256 * 1024, i)));
  const kept = Buffer.alloc(256 * 1024, 9);
  const [server, url] = await serve((_req, res) => {
    res.writeHead(200);
    void pipeline(Readable.from([given[0], kept, given[1], given[2]]), releasingSink(res));
  });
  try {
    const body = Buffer.from(await (await fetch(url)).arrayBuffer());
    const want = Buffer.concat([1, 9, 2, 3].map((i) => Buffer.alloc(256 * 1024, i)));
    assert.equal(Buffer.compare(body, want), 0);
    for (const g of given) assert.equal(g.length, 0, "a handed-over chunk left for the collector");
    assert.equal(kept.length, 256 * 1024);
    assert.ok(kept.every((b) => b === 9));
  } finally {
    server.close();
  }
});

test("a client that goes away mid-answer stops the body being read", async () => {
  let body!: Readable;
  let piped!: Promise<void>;
  const [server, url] = await serve((_req, res) => {
    res.writeHead(200);
    // Without end: only the client's leaving can finish this answer.
    body = new Readable({
      read() {
        this.push(Buffer.alloc(64 * 1024, 1));
      },
    });
    piped = pipeline(body, releasingSink(res));
  });
  try {
    const controller = new AbortController();
    const res = await fetch(url, { signal: controller.signal });
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    controller.abort();
    await assert.rejects(piped);
    assert.equal(body.destroyed, true);
  } finally {
    server.close();
    server.closeAllConnections();
  }
});
