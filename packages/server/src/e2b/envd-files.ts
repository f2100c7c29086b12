/**
 * envd's /files on denv: a file's bytes out (GET, streamed from /v1's tar of the path) and in (POST,
 * multipart or octet-stream, written through /v1's files route as the call's user).
 */
import { PassThrough, Readable } from "node:stream";
import type { ReadableStream as NodeReadableStream } from "node:stream/web";
import type { Context, Hono } from "hono";
import tar from "tar-stream";
import { CONNECT_CODES, ConnectError } from "./connect-protocol.ts";
import {
  absolute,
  boundedBody,
  checkedUser,
  type E2bCaller,
  type E2bContext,
  type Sandbox,
  userOf,
} from "./e2b-context.ts";
import { responseError } from "./envd-processes.ts";
import { asConnectError } from "./envd-routes.ts";

export function mountEnvdFiles(app: Hono, ctx: E2bContext): void {
  const { v1 } = ctx;

  // --- /files: a file's bytes in and out (the SDK's files.read and files.write) --------------

  /**
   * The sandbox, the key acted as, and the user of a /files call. A signed URL acts as the user it
   * signs (none: the service's own user), never one a header names; a call with the sandbox's token
   * as the user its query or Authorization header names, else the service's own.
   */
  async function filesCall(
    c: Context,
    operation: "read" | "write",
  ): Promise<{ s: Sandbox; caller: E2bCaller; user: string | undefined; path: string }> {
    const { s, caller, signedUser } = await ctx.filesCall(c, operation);
    const username = c.req.query("username");
    const user =
      signedUser !== undefined ? signedUser || undefined : username ? checkedUser(username) : userOf(c);
    return { s, caller, user, path: c.req.query("path") ?? "" };
  }

  app.get("/files", async (c) => {
    try {
      const { s, caller, user, path } = await filesCall(c, "read");
      const res = await v1(
        caller.id,
        `/v1/envs/${s.environment_id}/files?path=${encodeURIComponent(absolute(path))}${user ? `&user=${encodeURIComponent(user)}` : ""}`,
      );
      if (!res.ok || !res.body) throw await responseError(res);
      const file = await firstFileOfTar(res.body, path);
      return new Response(file.body, {
        status: 200,
        headers: { "content-type": "application/octet-stream", "content-length": String(file.size) },
      });
    } catch (err) {
      return filesError(err);
    }
  });

  app.post("/files", async (c) => {
    try {
      const { s, caller, user, path } = await filesCall(c, "write");
      const type = c.req.header("content-type") ?? "";
      const files: { path: string; bytes: Uint8Array }[] = [];
      const length = Number(c.req.header("content-length") ?? 0);
      if (length > MAX_UPLOAD_BYTES)
        throw new ConnectError(
          "resource_exhausted",
          `an upload of ${length} bytes is over the ${MAX_UPLOAD_BYTES}-byte limit here`,
        );
      if (type.startsWith("multipart/form-data")) {
        // A form is parsed whole: read no further than the limit first (it may come without a length).
        const raw = await boundedBody(c.req.raw.body, MAX_UPLOAD_BYTES);
        const form = await new Response(raw, { headers: { "content-type": type } }).formData();
        const parts = [...form.values()].filter((v): v is File => typeof v !== "string");
        // One file: the query's path names it (as the SDK sends it); several: each part's filename does.
        for (const v of parts)
          files.push({
            path: parts.length === 1 && path ? path : v.name,
            bytes: new Uint8Array(await v.arrayBuffer()),
          });
      } else {
        if (c.req.header("content-encoding"))
          throw new ConnectError(
            "invalid_argument",
            "compressed uploads are not accepted here: send the bytes as they are",
          );
        files.push({ path, bytes: new Uint8Array(await boundedBody(c.req.raw.body, MAX_UPLOAD_BYTES)) });
      }
      if (!files.length) throw new ConnectError("invalid_argument", "the upload carried no file");
      const written: unknown[] = [];
      for (const f of files) {
        const abs = absolute(f.path);
        const dir = abs.slice(0, abs.lastIndexOf("/")) || "/";
        const name = abs.slice(abs.lastIndexOf("/") + 1);
        if (!name) throw new ConnectError("invalid_argument", `${abs} names a directory, not a file`);
        const res = await v1(
          caller.id,
          `/v1/envs/${s.environment_id}/files?path=${encodeURIComponent(dir)}${user ? `&user=${encodeURIComponent(user)}` : ""}`,
          {
            method: "PUT",
            headers: { "content-type": "application/x-tar" },
            body: await oneFileTar(name, f.bytes),
          },
        );
        if (!res.ok) throw await responseError(res);
        written.push({ name, type: "file", path: abs });
      }
      return c.json(written);
    } catch (err) {
      return filesError(err);
    }
  });
}

/** The most one upload may carry here (it is held whole to make its tar). */
const MAX_UPLOAD_BYTES = 256 * 1024 * 1024;

/** envd's HTTP errors for /files: {code, message} with the status. */
function filesError(err: unknown): Response {
  const e = asConnectError(err);
  const status = CONNECT_CODES[e.code] === 499 ? 500 : CONNECT_CODES[e.code];
  return Response.json({ code: status, message: e.message }, { status });
}

/** A tar of one regular file, to PUT through /v1's files route. */
async function oneFileTar(name: string, bytes: Uint8Array): Promise<Buffer> {
  const pack = tar.pack();
  pack.entry({ name, size: bytes.length, mode: 0o644, type: "file" }, Buffer.from(bytes));
  pack.finalize();
  const parts: Buffer[] = [];
  for await (const chunk of pack) parts.push(chunk as Buffer);
  return Buffer.concat(parts);
}

/**
 * The one regular file a tar of a path holds (GET /v1/…/files of a file), streamed: its bytes as
 * they arrive. A directory or a link is refused (envd reads files, and never follows a link).
 */
async function firstFileOfTar(
  body: ReadableStream<Uint8Array>,
  path: string,
): Promise<{ size: number; body: ReadableStream<Uint8Array> }> {
  const extract = tar.extract();
  Readable.fromWeb(body as NodeReadableStream<Uint8Array>).pipe(extract);
  const it = extract[Symbol.asyncIterator]();
  const first = await it.next();
  if (first.done) throw new ConnectError("not_found", `${path} was not found`);
  const entry = first.value;
  if (entry.header.type !== "file") {
    entry.resume();
    extract.destroy();
    throw new ConnectError("invalid_argument", `${path} is a ${entry.header.type ?? "non-file"}, not a file`);
  }
  const size = entry.header.size ?? 0;
  const out = new PassThrough();
  entry.pipe(out);
  // The rest of the tar (its end blocks) is read and dropped once the file is through.
  entry.on(
    "end",
    () =>
      void it.next().then(
        () => extract.destroy(),
        () => {},
      ),
  );
  return { size, body: Readable.toWeb(out) as ReadableStream<Uint8Array> };
}
