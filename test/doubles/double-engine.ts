/**
 * What the providers' local doubles share: reading a request body, answering JSON, and each
 * sandbox as a container on the local engine (its image pulled from the local registry, commands
 * run by the engine's exec, the containers found and removed by the double's label at its close).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { PassThrough } from "node:stream";
import type Docker from "dockerode";

export async function readBody(req: IncomingMessage): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of req) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

export function sendJson(res: ServerResponse, status: number, value: unknown): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(value));
}

export function pullImage(docker: Docker, image: string): Promise<void> {
  return new Promise<void>((resolve, reject) =>
    docker.pull(image, (err: Error | null, stream: NodeJS.ReadableStream) =>
      err
        ? reject(err)
        : docker.modem.followProgress(stream, (e: Error | null) => (e ? reject(e) : resolve())),
    ),
  );
}

/** Runs argv in a container as a user, handing output on as it comes; its exit code. */
export async function execIn(
  docker: Docker,
  containerId: string,
  argv: string[],
  o: { user: string; env?: Record<string, string>; cwd?: string; input?: Buffer },
  onOut: (which: "stdout" | "stderr", b: Buffer) => void,
): Promise<number> {
  const c = docker.getContainer(containerId);
  const exec = await c.exec({
    Cmd: argv,
    User: o.user,
    Env: Object.entries(o.env ?? {}).map(([k, v]) => `${k}=${v}`),
    ...(o.cwd ? { WorkingDir: o.cwd } : {}),
    AttachStdout: true,
    AttachStderr: true,
    AttachStdin: o.input !== undefined,
  });
  const stream = await exec.start({ hijack: true, stdin: o.input !== undefined });
  const out = new PassThrough().on("data", (b: Buffer) => onOut("stdout", b));
  const err = new PassThrough().on("data", (b: Buffer) => onOut("stderr", b));
  c.modem.demuxStream(stream, out, err);
  if (o.input !== undefined) stream.end(o.input);
  await new Promise<void>((resolve, reject) =>
    stream.on("end", resolve).on("close", resolve).on("error", reject),
  );
  return (await exec.inspect()).ExitCode ?? -1;
}

/** The same, with its output collected. */
export async function captureIn(
  docker: Docker,
  containerId: string,
  argv: string[],
  o: { user: string; env?: Record<string, string>; cwd?: string; input?: Buffer },
): Promise<{ exitCode: number; stdout: Buffer; stderr: Buffer }> {
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  const exitCode = await execIn(docker, containerId, argv, o, (w, b) => (w === "stdout" ? out : err).push(b));
  return { exitCode, stdout: Buffer.concat(out), stderr: Buffer.concat(err) };
}

/** Removes every container a double made (by its label and value), at its close. */
export async function removeLabelled(docker: Docker, label: string, value: string): Promise<void> {
  const left = await docker.listContainers({ all: true, filters: { label: [`${label}=${value}`] } });
  await Promise.all(
    left.map((c) =>
      docker
        .getContainer(c.Id)
        .remove({ force: true })
        .catch(() => {}),
    ),
  );
}
