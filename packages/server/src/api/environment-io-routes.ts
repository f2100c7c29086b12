/**
 * Reaching into a running environment: exec, port URLs, and stopping one service (files are in
 * file-routes.ts). Exec and stopping go through the target the environment runs on.
 */
import { once } from "node:events";
import { PassThrough, type Readable } from "node:stream";
import { DenvError, isDenvError } from "@denv/protocol";
import { stream } from "hono/streaming";
import { z } from "zod";
import { environmentTarget } from "../environments/team-targets.ts";
import { listIngressNames, publishPortName } from "../ingress/ingress-routes.ts";
import { tokenAccessOf } from "../people/access-rules.ts";
import { createPortUrl, listPortUrls } from "../port-tunnels.ts";
import { revokePortUrls } from "../store/port-url-store.ts";
import type { ExecOutcome, OutputSink } from "../targets/target.ts";
import type { ApiContext } from "./api-deps.ts";
import { type ApiRoute, route } from "./api-route.ts";
import {
  envIngress,
  execBody,
  execResult,
  portUrlBody,
  portUrlCreated,
  portUrlListed,
  queryFlag,
} from "./api-schemas.ts";
import { assertRunning, awake, envOf, runningOn, serviceOf, tcpPort } from "./environment-access.ts";
import { requestBody, splitExecStream, streamResponse } from "./host-bytes.ts";

/** The JSON form carries stdin as base64 in its body: 50 MiB of it. */
const EXEC_LIMIT_BYTES = 80 * 1024 * 1024;
/** The stream form's stdin has no bound but this. */
const EXEC_STREAM_LIMIT_BYTES = 64 * 1024 ** 3;
/** Output the JSON answer holds when the request names no max_output_bytes. */
const DEFAULT_MAX_OUTPUT_BYTES = 16 * 1024 * 1024;

type ExecRequest = z.infer<typeof execBody>;

/** A command's outcome as the API answers it, with the output collected (or streamed: empty). */
function execAnswer(r: ExecOutcome, encoding: "utf8" | "base64", stdout: Buffer, stderr: Buffer) {
  const out = (b: Buffer) => b.toString(encoding);
  return {
    exit_code: r.exitCode,
    stdout: out(stdout),
    stderr: out(stderr),
    encoding,
    stdout_truncated: r.stdoutTruncated,
    stdout_dropped_bytes: r.stdoutDroppedBytes,
    stderr_dropped_bytes: r.stderrDroppedBytes,
    stderr_truncated: r.stderrTruncated,
    timed_out: r.timedOut,
    duration_ms: r.durationMs,
  };
}

/**
 * Where a command runs and how, from the request: a function that runs it on the environment's
 * target (its output to `onOutput`, at most `maxOutputBytes` per stream when given).
 */
async function execTarget(c: ApiContext, body: ExecRequest) {
  const e = await awake(c, await envOf(c));
  const { target, placed } = await environmentTarget(c.var.deps, e);
  const service = await serviceOf(c.var.deps, e, body.service);
  return (stdin: Readable | Buffer | null, onOutput: OutputSink, maxOutputBytes = body.max_output_bytes) =>
    target.exec(
      placed,
      {
        service,
        command: body.command,
        user: body.user,
        cwd: body.cwd,
        env: body.env,
        timeoutMs: body.timeout_ms,
        maxOutputBytes,
        ...(body.tty ? { tty: body.tty } : {}),
      },
      stdin,
      onOutput,
    );
}

/**
 * The streamed answer: newline-delimited JSON, output chunks ({"stream", "data"} in base64) as the
 * command writes them, then one {"result"} line (its stdout and stderr empty), or an {"error"}.
 * Each chunk is written before the next is taken from the host: a reader that stops, stops it.
 */
async function streamedExec(c: ApiContext, body: ExecRequest, stdin: Readable | Buffer | null) {
  // Where it runs is settled first: a missing environment or service is an HTTP error, not a line.
  const run = await execTarget(c, body);
  c.header("content-type", "application/x-ndjson");
  return stream(c, async (s) => {
    const enc = body.encoding ?? "utf8";
    // A quiet command's stream carries an empty line now and then: no transport between here
    // and the caller takes a command that is still running for a dead connection.
    let writing = Promise.resolve();
    const write = (line: string) => {
      writing = writing.then(() => s.write(line).then(() => {}));
      return writing;
    };
    const keepAlive = setInterval(() => void write("\n").catch(() => {}), c.var.deps.keepAliveMs);
    try {
      const r = await run(stdin, async (which, data) => {
        if (s.aborted) throw new Error("the client went away");
        await write(`${JSON.stringify({ stream: which, data: data.toString("base64") })}\n`);
      });
      clearInterval(keepAlive);
      await write(`${JSON.stringify({ result: execAnswer(r, enc, Buffer.alloc(0), Buffer.alloc(0)) })}\n`);
    } catch (err) {
      clearInterval(keepAlive);
      await write(
        `${JSON.stringify(isDenvError(err) ? err.toJSON() : { error: { code: "internal", message: (err as Error).message } })}\n`,
      );
    } finally {
      clearInterval(keepAlive);
    }
  });
}

/** Kinds of frame in exec's stream form's answer (docker's multiplexed stream, plus two). */
const MUX_STDOUT = 1;
const MUX_STDERR = 2;
/** The result, as JSON: the last frame of a command that ran. */
const MUX_RESULT = 3;
/** An error, as JSON ({"error": {code, message}}): the last frame of one that could not. */
const MUX_ERROR = 4;
/** Nothing: sent while a command is quiet, so no transport takes the stream for a dead one. */
const MUX_KEEPALIVE = 5;

function muxFrame(kind: number, payload: Buffer): Buffer[] {
  const head = Buffer.alloc(8);
  head[0] = kind;
  head.writeUInt32BE(payload.length, 4);
  return [head, payload];
}

/**
 * The stream form's answer: frames of an 8-byte header (u8 kind, three zero bytes, u32 length,
 * big-endian, as `docker attach` multiplexes) and the bytes as they are: no base64, no JSON per
 * chunk. Each frame is written before the next is taken from the host.
 */
async function multiplexedExec(c: ApiContext, body: ExecRequest, stdin: Readable) {
  const run = await execTarget(c, body);
  const out = new PassThrough({ highWaterMark: 1024 * 1024 });
  const send = async (kind: number, payload: Buffer) => {
    if (out.destroyed) throw new Error("the client went away");
    let room = true;
    for (const part of muxFrame(kind, payload)) room = out.write(part);
    if (!room) await once(out, "drain");
  };
  const keepAlive = setInterval(() => {
    // Only when nothing is waiting to go out: a keep-alive never queues behind output.
    if (!out.destroyed && out.writableLength === 0)
      out.write(Buffer.concat(muxFrame(MUX_KEEPALIVE, Buffer.alloc(0))));
  }, c.var.deps.keepAliveMs);
  out.on("close", () => clearInterval(keepAlive));
  void (async () => {
    try {
      const r = await run(stdin, (which, data) => send(which === "stdout" ? MUX_STDOUT : MUX_STDERR, data));
      clearInterval(keepAlive);
      const enc = body.encoding ?? "utf8";
      await send(
        MUX_RESULT,
        Buffer.from(JSON.stringify(execAnswer(r, enc, Buffer.alloc(0), Buffer.alloc(0)))),
      );
    } catch (err) {
      const e = isDenvError(err)
        ? err.toJSON()
        : { error: { code: "internal", message: (err as Error).message } };
      clearInterval(keepAlive);
      if (!out.destroyed) out.write(Buffer.concat(muxFrame(MUX_ERROR, Buffer.from(JSON.stringify(e)))));
    }
    clearInterval(keepAlive);
    out.end();
  })();
  return streamResponse(c, out, "application/vnd.denv.multiplexed-stream");
}

export const environmentIoRoutes: ApiRoute[] = [
  route({
    method: "post",
    path: "/v1/envs/{id}/exec",
    name: "envs.exec",
    summary: "Run a command in a service (?stream=true: NDJSON output chunks as they come, then the result)",
    body: execBody,
    query: z.object({
      stream: queryFlag.describe("true: NDJSON output chunks, then the result; default: one JSON answer"),
    }),
    response: execResult,
    auth: true,
    bodyLimitBytes: EXEC_LIMIT_BYTES,
    handler: async (c, { body, query }) => {
      const stdin = body.stdin !== undefined ? Buffer.from(body.stdin, "base64") : null;
      if (query.stream === "true") return streamedExec(c, body, stdin);
      const run = await execTarget(c, body);
      // The target drops what is past the limit; only what it keeps travels and is held here.
      const limit = body.max_output_bytes ?? DEFAULT_MAX_OUTPUT_BYTES;
      const got = { stdout: [] as Buffer[], stderr: [] as Buffer[] };
      const r = await run(
        stdin,
        (which, chunk) => {
          got[which].push(chunk);
        },
        limit,
      );
      const out = Buffer.concat(got.stdout).subarray(0, limit);
      const err = Buffer.concat(got.stderr).subarray(0, limit);
      return c.json(execAnswer(r, body.encoding ?? "utf8", out, err));
    },
  }),
  route({
    method: "post",
    path: "/v1/envs/{id}/exec/stream",
    name: "envs.execStream",
    summary:
      "Run a command with its stdin streamed from the body: the first line is the exec request (JSON), the rest of the body is stdin. The answer streams as the command writes, in frames of an 8-byte header (u8 kind: 1 stdout, 2 stderr, 3 the result as JSON, 4 an error as JSON, 5 a keep-alive with no bytes while the command is quiet; three zero bytes; u32 length, big-endian) and that many bytes",
    bodyType: "exec-stream",
    body: execBody.omit({ stdin: true }),
    responseType: "multiplexed",
    auth: true,
    bodyLimitBytes: null,
    handler: async (c) => {
      // The environment first: another team's id is not_found before any of the body is read.
      await awake(c, await envOf(c));
      const { request, stdin } = await splitExecStream(
        requestBody(c, EXEC_STREAM_LIMIT_BYTES),
        4 * 1024 ** 2,
      );
      const parsed = execBody.omit({ stdin: true }).safeParse(request);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        throw new DenvError(
          "invalid_argument",
          `${issue?.path.join(".") || "(exec request)"}: ${issue?.message ?? "invalid"}`,
        );
      }
      return multiplexedExec(c, parsed.data, stdin);
    },
  }),
  route({
    method: "post",
    path: "/v1/envs/{id}/ports/{port}",
    name: "envs.openPort",
    summary:
      "A URL reaching a TCP port inside a service (HTTP and WebSocket), relayed through the host's connection; the URL is the credential",
    body: portUrlBody,
    response: portUrlCreated,
    status: 201,
    auth: true,
    handler: async (c, { body }) => {
      const e = await awake(c, await envOf(c));
      runningOn(e);
      const port = tcpPort(c.req.param("port"));
      await serviceOf(c.var.deps, e, body.service);
      const { url } = await createPortUrl(c.var.deps.store, {
        teamId: c.var.teamId,
        environmentId: e.id,
        service: body.service ?? null,
        port,
        origin: c.var.deps.portsOrigin,
      });
      // The port by name too: `{port}-{id}` reaches the service asked for (private, as every name
      // not listed in x-denv.ingress.public).
      const names = c.var.deps.ingress;
      const ingressUrl = names
        ? await publishPortName(c.var.deps.store, names, e, body.service ?? null, port)
        : null;
      return c.json({ url, port, service: body.service ?? null, ingress_url: ingressUrl }, 201);
    },
  }),
  route({
    method: "get",
    path: "/v1/envs/{id}/ingress",
    name: "envs.ingress",
    summary:
      "The environment's ingress names for its published ports, and the token its private names ask for",
    response: envIngress,
    auth: true,
    handler: async (c) => {
      const e = await envOf(c);
      const names = c.var.deps.ingress;
      if (!names) return c.json({ domain: null, token: null, names: [], port_host_template: null });
      return c.json({
        domain: names.domain,
        // The caller's own reach: a read-only caller's token reads (access-rules.ts).
        token: names.tokenFor(e.id, tokenAccessOf(c.var.role)),
        names: await listIngressNames(c.var.deps.store, names, e.id),
        port_host_template: names.urlFor(names.portHost(0, e.id)).replace("://0-", "://{port}-"),
      });
    },
  }),
  // Port URLs are bound to their environment: listed (never with their tokens, shown once) and
  // revoked per environment, and revoked with it when it is destroyed.
  route({
    method: "get",
    path: "/v1/envs/{id}/ports",
    name: "envs.ports",
    summary: "The environment's port URLs (never their tokens, which are shown once)",
    response: z.object({ ports: z.array(portUrlListed) }),
    auth: true,
    handler: async (c) => c.json({ ports: await listPortUrls(c.var.deps.store, (await envOf(c)).id) }),
  }),
  route({
    method: "delete",
    path: "/v1/envs/{id}/ports",
    name: "envs.revokePorts",
    summary: "Revoke every port URL of the environment",
    response: z.object({ revoked: z.number() }),
    auth: true,
    handler: async (c) => c.json({ revoked: await revokePortUrls(c.var.deps.store, (await envOf(c)).id) }),
  }),
  route({
    method: "delete",
    path: "/v1/envs/{id}/ports/{port}",
    name: "envs.revokePort",
    summary: "Revoke the environment's port URLs to one port",
    response: z.object({ revoked: z.number() }),
    auth: true,
    handler: async (c) => {
      const e = await envOf(c);
      return c.json({ revoked: await revokePortUrls(c.var.deps.store, e.id, tcpPort(c.req.param("port"))) });
    },
  }),
  route({
    method: "post",
    path: "/v1/envs/{id}/services/{service}/stop",
    name: "envs.stopService",
    summary: "Stop one service's container; the rest of the environment keeps running",
    response: z.object({ stopped: z.string() }),
    auth: true,
    handler: async (c) => {
      const e = await envOf(c);
      assertRunning(e);
      const service = (await serviceOf(c.var.deps, e, c.req.param("service"))) as string;
      const { target, placed } = await environmentTarget(c.var.deps, e);
      await target.stopService(placed, service);
      return c.json({ stopped: service });
    },
  }),
];
