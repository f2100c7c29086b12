/**
 * The upstream servers of a test's own internet (test-internet.ts starts this inside its network
 * namespace): HTTP on 80 and HTTPS on 443, each answering with what it was asked (method, path,
 * Host, the headers a proxy might add, body bytes), and a TCP echo on 7000. The HTTPS certificate
 * is the test CA's. Prints "ready" once all three listen.
 *
 *     node internet-upstream.ts KEY.pem CERT.pem
 */
import { readFileSync } from "node:fs";
import { createServer as createHttp, type IncomingMessage, type ServerResponse } from "node:http";
import { createServer as createHttps } from "node:https";
import { createServer as createTcp } from "node:net";

const [key, cert] = process.argv.slice(2) as [string, string];

function answer(req: IncomingMessage, res: ServerResponse): void {
  let bytes = 0;
  req.on("data", (c: Buffer) => {
    bytes += c.length;
  });
  req.on("end", () => {
    res.setHeader("content-type", "application/json");
    res.end(
      JSON.stringify({
        method: req.method,
        url: req.url,
        host: req.headers.host,
        authorization: req.headers.authorization ?? null,
        bytes,
      }),
    );
  });
}

const listening = [
  new Promise<void>((r) => createHttp(answer).listen(80, "0.0.0.0", r)),
  new Promise<void>((r) =>
    createHttps({ key: readFileSync(key), cert: readFileSync(cert) }, answer).listen(443, "0.0.0.0", r),
  ),
  new Promise<void>((r) => createTcp((s) => s.pipe(s)).listen(7000, "0.0.0.0", r)),
];
await Promise.all(listening);
process.stdout.write("ready\n");
