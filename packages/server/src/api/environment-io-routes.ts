/**
 * Reaching into a running environment: exec, port URLs, and stopping one service (files are in
 * file-routes.ts). Each goes to the environment's host as a typed host operation.
 */
import { isDenvError, type OpResult } from "@denv/protocol";
import { stream } from "hono/streaming";
import { z } from "zod";
import { createPortUrl, listPortUrls, revokePortUrls } from "../port-tunnels.ts";
import { type ApiRoute, route } from "./api-route.ts";
import { execBody, execResult, portUrlBody, portUrlCreated, portUrlListed } from "./api-schemas.ts";
import { envOf, runningOn, serviceOf, tcpPort } from "./environment-access.ts";

/** Exec stdin travels as base64 in JSON: 50 MiB of it. */
const EXEC_LIMIT_BYTES = 80 * 1024 * 1024;

/** A host's exec result as the API answers it: output decoded to utf8 unless base64 was asked. */
function execAnswer(r: OpResult<"exec">, encoding: "utf8" | "base64", withOutput: boolean) {
  const out = (b64: string) => (encoding === "base64" ? b64 : Buffer.from(b64, "base64").toString("utf8"));
  return {
    exit_code: r.exit_code,
    stdout: withOutput ? out(r.stdout_b64) : "",
    stderr: withOutput ? out(r.stderr_b64) : "",
    encoding,
    stdout_truncated: r.stdout_truncated,
    stdout_dropped_bytes: r.stdout_dropped_bytes,
    stderr_dropped_bytes: r.stderr_dropped_bytes,
    stderr_truncated: r.stderr_truncated,
    timed_out: r.timed_out,
    duration_ms: r.duration_ms,
  };
}

export const environmentIoRoutes: ApiRoute[] = [
  route({
    method: "post",
    path: "/v1/envs/{id}/exec",
    summary: "Run a command in a service (?stream=true: NDJSON output chunks as they come, then the result)",
    body: execBody,
    query: z.object({
      stream: z.string().optional().describe("true: NDJSON output chunks, then the result"),
    }),
    response: execResult,
    auth: true,
    bodyLimitBytes: EXEC_LIMIT_BYTES,
    handler: async (c, { body, query }) => {
      const { hub } = c.var.deps;
      const e = await envOf(c);
      const { hostId, stackId } = runningOn(e);
      const enc = body.encoding ?? "utf8";
      const params = {
        stack_id: stackId,
        service: await serviceOf(c.var.deps, e, body.service),
        command: body.command,
        user: body.user,
        cwd: body.cwd,
        env: body.env,
        stdin_b64: body.stdin,
        timeout_ms: body.timeout_ms,
        max_output_bytes: body.max_output_bytes,
      };
      if (query.stream !== "true")
        return c.json(execAnswer(await hub.call(hostId, "exec", params), enc, true));
      // ?stream=true: newline-delimited JSON, output chunks ({"stream", "data"} in base64) as the
      // command writes them, then one {"result"} line with the exit code (its stdout/stderr empty).
      c.header("content-type", "application/x-ndjson");
      return stream(c, async (s) => {
        let writes = Promise.resolve();
        const line = (v: unknown) => {
          writes = writes.then(() => s.write(`${JSON.stringify(v)}\n`)).then(() => {});
        };
        try {
          const r = await hub.call(
            hostId,
            "exec",
            { ...params, stream: true },
            { onEvent: (which, data) => line({ stream: which, data: data.toString("base64") }) },
          );
          line({ result: execAnswer(r, enc, false) });
        } catch (err) {
          line(
            isDenvError(err)
              ? err.toJSON()
              : { error: { code: "internal", message: (err as Error).message } },
          );
        }
        await writes;
      });
    },
  }),
  route({
    method: "post",
    path: "/v1/envs/{id}/ports/{port}",
    summary:
      "A URL reaching a TCP port inside a service (HTTP and WebSocket), relayed through the host's connection; the URL is the credential",
    body: portUrlBody,
    response: portUrlCreated,
    status: 201,
    auth: true,
    handler: async (c, { body }) => {
      const e = await envOf(c);
      runningOn(e);
      const port = tcpPort(c.req.param("port"));
      await serviceOf(c.var.deps, e, body.service);
      const { url } = await createPortUrl(c.var.deps.store, {
        teamId: c.var.teamId,
        environmentId: e.id,
        service: body.service ?? null,
        port,
        origin: new URL(c.req.url).origin,
      });
      return c.json({ url, port, service: body.service ?? null }, 201);
    },
  }),
  // Port URLs are bound to their environment: listed (never with their tokens, shown once) and
  // revoked per environment, and revoked with it when it is destroyed.
  route({
    method: "get",
    path: "/v1/envs/{id}/ports",
    summary: "The environment's port URLs (never their tokens, which are shown once)",
    response: z.object({ ports: z.array(portUrlListed) }),
    auth: true,
    handler: async (c) => c.json({ ports: await listPortUrls(c.var.deps.store, (await envOf(c)).id) }),
  }),
  route({
    method: "delete",
    path: "/v1/envs/{id}/ports",
    summary: "Revoke every port URL of the environment",
    response: z.object({ revoked: z.number() }),
    auth: true,
    handler: async (c) => c.json({ revoked: await revokePortUrls(c.var.deps.store, (await envOf(c)).id) }),
  }),
  route({
    method: "delete",
    path: "/v1/envs/{id}/ports/{port}",
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
    summary: "Stop one service's container; the rest of the environment keeps running",
    response: z.object({ stopped: z.string() }),
    auth: true,
    handler: async (c) => {
      const e = await envOf(c);
      const { hostId, stackId } = runningOn(e);
      const service = (await serviceOf(c.var.deps, e, c.req.param("service"))) as string;
      return c.json(await c.var.deps.hub.call(hostId, "stop_service", { stack_id: stackId, service }));
    },
  }),
];
