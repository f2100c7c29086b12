import assert from "node:assert/strict";
import { type AddressInfo, createServer } from "node:net";
import { test } from "node:test";
import { connect } from "node:tls";
import { readClientHello } from "./tls-client-hello.ts";

/** A real ClientHello, as Node's TLS sends it for this server name (caught by a plain TCP server). */
async function helloFor(servername: string | undefined): Promise<Buffer> {
  let resolve: (b: Buffer) => void = () => {};
  const got = new Promise<Buffer>((r) => {
    resolve = r;
  });
  const server = createServer((s) => {
    let b = Buffer.alloc(0);
    s.on("data", (c: Buffer) => {
      b = Buffer.concat([b, c]);
      if (b.length >= 5 && b.length >= 5 + b.readUInt16BE(3)) {
        resolve(b);
        s.destroy();
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const tls = connect({
    host: "127.0.0.1",
    port: (server.address() as AddressInfo).port,
    ...(servername === undefined ? {} : { servername }),
    rejectUnauthorized: false,
  });
  tls.on("error", () => {});
  const hello = await got;
  tls.destroy();
  server.close();
  return hello;
}

/** The offset of the server_name extension's name bytes in a hello that names `name`. */
const nameAt = (hello: Buffer, name: string) => hello.indexOf(Buffer.from(name));

test("a real ClientHello gives its server name; one without SNI gives none; plain bytes are not TLS", async () => {
  const hello = await helloFor("pkg.mirror.test");
  assert.deepEqual(readClientHello(hello), { kind: "hello", serverName: "pkg.mirror.test" });
  assert.deepEqual(readClientHello(await helloFor(undefined)), { kind: "hello", serverName: null });
  assert.deepEqual(readClientHello(Buffer.from("GET / HTTP/1.1\r\n")), { kind: "not_tls" });
  assert.deepEqual(readClientHello(Buffer.from("SSH-2.0-OpenSSH_9.2\r\n")), { kind: "not_tls" });
});

test("a hello cut anywhere is partial until its record is whole", async () => {
  const hello = await helloFor("pkg.mirror.test");
  for (const n of [0, 1, 4, 5, 40, hello.length - 1])
    assert.equal(readClientHello(hello.subarray(0, n)).kind, "partial", `${n} bytes`);
});

test("hostile hellos: lying lengths, two server names, a name not in ASCII, a record too long", async () => {
  const hello = await helloFor("pkg.mirror.test");
  const at = nameAt(hello, "pkg.mirror.test");
  // The name's own length says more than there is.
  const longName = Buffer.from(hello);
  longName.writeUInt16BE(0x4000, at - 2);
  assert.equal(readClientHello(longName).kind, "malformed");
  // A byte of the name that is not ASCII (a look-alike's UTF-8 would be).
  const nonAscii = Buffer.from(hello);
  nonAscii[at + 5] = 0xd1;
  assert.deepEqual(readClientHello(nonAscii), { kind: "malformed", why: "a server name not in ASCII" });
  // The handshake's own length longer than its record.
  const split = Buffer.from(hello);
  split.writeUIntBE(0xffff, 6, 3);
  assert.equal(readClientHello(split).kind, "malformed");
  // A record length past what TLS allows.
  const huge = Buffer.from(hello);
  huge.writeUInt16BE(0x5000, 3);
  assert.deepEqual(readClientHello(huge), { kind: "malformed", why: "a record longer than TLS allows" });
  // Not a ClientHello (a ServerHello's type).
  const notHello = Buffer.from(hello);
  notHello[5] = 0x02;
  assert.deepEqual(readClientHello(notHello), { kind: "malformed", why: "not a ClientHello" });
  // A second server_name extension appended to the list (lengths fixed up): refused, never one chosen.
  const sniStart = at - 9; // type(2) len(2) listlen(2) nametype(1) namelen(2)
  assert.equal(hello.readUInt16BE(sniStart), 0);
  const extLen = hello.readUInt16BE(sniStart + 2);
  const ext = hello.subarray(sniStart, sniStart + 4 + extLen);
  const twice = Buffer.concat([hello, ext]);
  twice.writeUInt16BE(hello.readUInt16BE(3) + ext.length, 3);
  twice.writeUIntBE(hello.readUIntBE(6, 3) + ext.length, 6, 3);
  // The extensions' total length: found by walking the hello's fixed fields.
  let off = 5 + 4 + 2 + 32;
  off += 1 + (hello[off] as number);
  off += 2 + hello.readUInt16BE(off);
  off += 1 + (hello[off] as number);
  twice.writeUInt16BE(hello.readUInt16BE(off) + ext.length, off);
  assert.deepEqual(readClientHello(twice), { kind: "malformed", why: "two server_name extensions" });
});
