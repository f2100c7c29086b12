/**
 * Reading answers from servers a team can name (registries, git hosts, cloud APIs): every body is
 * read up to a byte limit and every redirect is looked at before it is followed. Used by the
 * control plane, which must never hold an unbounded answer in memory nor be led to another host.
 */
import { DenvError, type ErrorCode } from "@denv/protocol";

/** Reads a response body, refusing (and cancelling) one longer than maxBytes. */
export async function readBounded(
  res: Response,
  maxBytes: number,
  what: string,
  code: ErrorCode = "registry_error",
): Promise<Buffer> {
  const declared = Number(res.headers.get("content-length") ?? Number.NaN);
  if (Number.isFinite(declared) && declared > maxBytes) {
    await res.body?.cancel().catch(() => {});
    throw new DenvError(code, `${what} is ${declared} bytes, over the ${maxBytes} denv reads`);
  }
  if (!res.body) return Buffer.alloc(0);
  const reader = res.body.getReader();
  const chunks: Buffer[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) {
      await reader.cancel().catch(() => {});
      throw new DenvError(code, `${what} is over the ${maxBytes} bytes denv reads`);
    }
    chunks.push(Buffer.from(value));
  }
  return Buffer.concat(chunks, total);
}

/** host[:port] of a URL as the allowlist names it (the port only when not the scheme's default). */
export function hostOf(url: URL): string {
  return url.host.toLowerCase();
}
