/**
 * The server name a TLS ClientHello asks for (its SNI extension), read without decrypting
 * anything: the egress proxy compares it with the name a CONNECT asked for, so a tunnel opened to
 * an allowed name cannot carry a handshake for another host on the same address. Every length is
 * checked against what is there: a hello that lies about its lengths is not one.
 */

/** Most bytes a ClientHello is read from (one TLS record's largest body and its header). */
export const MAX_HELLO_BYTES = 5 + 16_384;

export type HelloReading =
  /** More bytes are needed to read it. */
  | { kind: "partial" }
  /** Not a TLS handshake at all (plain bytes through a tunnel). */
  | { kind: "not_tls" }
  /** A TLS handshake that is not a well-formed ClientHello. */
  | { kind: "malformed"; why: string }
  /** A ClientHello, with its server name (null: it names none). */
  | { kind: "hello"; serverName: string | null };

/** Reads the first bytes a client sent through a tunnel. */
export function readClientHello(b: Buffer): HelloReading {
  if (b.length === 0) return { kind: "partial" };
  if (b[0] !== 0x16) return { kind: "not_tls" };
  if (b.length < 5) return { kind: "partial" };
  if (b[1] !== 0x03) return { kind: "malformed", why: "not a TLS record version" };
  const recordLen = b.readUInt16BE(3);
  if (recordLen > 16_384) return { kind: "malformed", why: "a record longer than TLS allows" };
  if (b.length < 5 + recordLen) return { kind: "partial" };
  const body = b.subarray(5, 5 + recordLen);
  // A ClientHello split over several records is legal but never sent by real clients: refused.
  if (body.length < 4 || body[0] !== 0x01) return { kind: "malformed", why: "not a ClientHello" };
  const helloLen = body.readUIntBE(1, 3);
  if (helloLen + 4 > body.length) return { kind: "malformed", why: "a ClientHello split over records" };
  const h = body.subarray(4, 4 + helloLen);
  let off = 2 + 32; // version, random
  const need = (n: number) => off + n <= h.length;
  if (!need(1)) return { kind: "malformed", why: "cut short" };
  off += 1 + (h[off] as number); // session id
  if (!need(2)) return { kind: "malformed", why: "cut short" };
  off += 2 + h.readUInt16BE(off); // cipher suites
  if (!need(1)) return { kind: "malformed", why: "cut short" };
  off += 1 + (h[off] as number); // compression methods
  if (off === h.length) return { kind: "hello", serverName: null }; // no extensions
  if (!need(2)) return { kind: "malformed", why: "cut short" };
  const extEnd = off + 2 + h.readUInt16BE(off);
  if (extEnd > h.length) return { kind: "malformed", why: "extensions longer than the hello" };
  off += 2;
  let serverName: string | null = null;
  let seen = false;
  while (off < extEnd) {
    if (off + 4 > extEnd) return { kind: "malformed", why: "an extension cut short" };
    const type = h.readUInt16BE(off);
    const len = h.readUInt16BE(off + 2);
    const ext = h.subarray(off + 4, off + 4 + len);
    if (off + 4 + len > extEnd) return { kind: "malformed", why: "an extension longer than the list" };
    off += 4 + len;
    if (type !== 0) continue;
    // Two server_name extensions: which one the server reads is the server's choice. Refused.
    if (seen) return { kind: "malformed", why: "two server_name extensions" };
    seen = true;
    if (ext.length < 2 || ext.readUInt16BE(0) + 2 !== ext.length)
      return { kind: "malformed", why: "a server_name list of the wrong length" };
    let p = 2;
    while (p < ext.length) {
      if (p + 3 > ext.length) return { kind: "malformed", why: "a server name cut short" };
      const nameType = ext[p] as number;
      const nameLen = ext.readUInt16BE(p + 1);
      if (p + 3 + nameLen > ext.length) return { kind: "malformed", why: "a server name cut short" };
      if (nameType === 0) {
        if (serverName !== null) return { kind: "malformed", why: "two host names in server_name" };
        const raw = ext.subarray(p + 3, p + 3 + nameLen);
        // Host names are ASCII (RFC 6066); anything else is never compared as text.
        if (!raw.every((c) => c > 0x20 && c < 0x7f))
          return { kind: "malformed", why: "a server name not in ASCII" };
        serverName = raw.toString("latin1");
      }
      p += 3 + nameLen;
    }
  }
  return { kind: "hello", serverName };
}
