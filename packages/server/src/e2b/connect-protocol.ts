/**
 * The subset of the Connect protocol (connectrpc.com/docs/protocol) that E2B's SDKs speak to envd:
 * JSON only, unary calls (`application/json`, the bare message both ways) and server streams
 * (`application/connect+json`: each message an envelope of one flag byte, a u32 big-endian length
 * and that many bytes of JSON; the stream ends with an envelope flagged END_STREAM whose JSON says
 * whether it failed). No compression and no binary protobuf: neither SDK asks for them.
 */

/** An envelope flag: this envelope ends the stream (its JSON is `{error?, metadata?}`). */
export const END_STREAM_FLAG = 0x02;
/** An envelope flag: the payload is compressed (never sent here; refused when received). */
const COMPRESSED_FLAG = 0x01;
const ENVELOPE_HEAD_BYTES = 5;
/** The largest request message read (a StartRequest or a file's SendInput chunk, as JSON). */
export const MAX_CONNECT_MESSAGE_BYTES = 8 * 1024 * 1024;

/** Connect's error codes, with the HTTP status a unary call answers each with. */
export const CONNECT_CODES = {
  canceled: 499,
  unknown: 500,
  invalid_argument: 400,
  deadline_exceeded: 504,
  not_found: 404,
  already_exists: 409,
  permission_denied: 403,
  resource_exhausted: 429,
  failed_precondition: 400,
  aborted: 409,
  out_of_range: 400,
  unimplemented: 501,
  internal: 500,
  unavailable: 503,
  data_loss: 500,
  unauthenticated: 401,
} as const;
export type ConnectCode = keyof typeof CONNECT_CODES;

/** An error to answer a Connect call with: its code, and words for the caller. */
export class ConnectError extends Error {
  readonly code: ConnectCode;
  constructor(code: ConnectCode, message: string) {
    super(message);
    this.code = code;
  }
  toJSON(): { code: ConnectCode; message: string } {
    return { code: this.code, message: this.message };
  }
}

/** One envelope: its flags and JSON (as bytes). */
export function encodeEnvelope(message: unknown, flags = 0): Buffer {
  const json = Buffer.from(JSON.stringify(message));
  const out = Buffer.allocUnsafe(ENVELOPE_HEAD_BYTES + json.length);
  out[0] = flags;
  out.writeUInt32BE(json.length, 1);
  json.copy(out, ENVELOPE_HEAD_BYTES);
  return out;
}

/** The envelope that ends a stream: empty when it ended well, else its error. */
export function endOfStream(error?: ConnectError): Buffer {
  return encodeEnvelope(error ? { error: error.toJSON() } : {}, END_STREAM_FLAG);
}

/**
 * Reads envelopes from a body as they arrive. A length past the limit, a compressed envelope or a
 * payload that is not JSON is the caller's mistake (invalid_argument); a body that ends inside an
 * envelope is cut (also refused, never taken as a shorter message).
 */
export async function* readEnvelopes(
  body: AsyncIterable<Uint8Array>,
  maxBytes = MAX_CONNECT_MESSAGE_BYTES,
): AsyncGenerator<{ flags: number; message: unknown }> {
  let buf = Buffer.alloc(0);
  for await (const chunk of body) {
    buf = buf.length ? Buffer.concat([buf, chunk]) : Buffer.from(chunk);
    while (buf.length >= ENVELOPE_HEAD_BYTES) {
      const flags = buf[0] as number;
      const length = buf.readUInt32BE(1);
      if (length > maxBytes)
        throw new ConnectError(
          "invalid_argument",
          `a message of ${length} bytes is over the ${maxBytes}-byte limit`,
        );
      if (flags & COMPRESSED_FLAG)
        throw new ConnectError(
          "invalid_argument",
          "compressed messages are not accepted (send them uncompressed)",
        );
      if (buf.length < ENVELOPE_HEAD_BYTES + length) break;
      const payload = buf.subarray(ENVELOPE_HEAD_BYTES, ENVELOPE_HEAD_BYTES + length);
      buf = buf.subarray(ENVELOPE_HEAD_BYTES + length);
      yield { flags, message: parseJson(payload) };
    }
  }
  if (buf.length) throw new ConnectError("invalid_argument", "the request ended inside a message");
}

/** A message's JSON; not JSON (or not an object) is invalid_argument. */
export function parseJson(bytes: Uint8Array): Record<string, unknown> {
  let v: unknown;
  try {
    v = bytes.length ? JSON.parse(Buffer.from(bytes).toString("utf8")) : {};
  } catch {
    throw new ConnectError("invalid_argument", "the message is not JSON");
  }
  if (v === null || typeof v !== "object" || Array.isArray(v))
    throw new ConnectError("invalid_argument", "the message is not a JSON object");
  return v as Record<string, unknown>;
}
