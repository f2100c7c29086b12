/** A tar of one file, and the files of a tar by name: what the file routes take and give. */
import tar from "tar-stream";

export async function tarOf(name: string, body: string): Promise<Uint8Array> {
  const pack = tar.pack();
  pack.entry({ name, mode: 0o644 }, body);
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack) chunks.push(c as Buffer);
  return new Uint8Array(Buffer.concat(chunks));
}

export async function filesOf(body: Buffer): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const extract = tar.extract();
  const done = new Promise<void>((resolve, reject) => {
    extract.on("entry", (h, stream, next) => {
      const parts: Buffer[] = [];
      stream.on("data", (d: unknown) => parts.push(d as Buffer));
      stream.on("end", () => {
        if (h.type === "file") out[h.name] = Buffer.concat(parts).toString();
        next();
      });
    });
    extract.on("finish", resolve);
    extract.on("error", reject);
  });
  extract.end(body);
  await done;
  return out;
}
