/**
 * A local double of Modal's API, written from Modal's published protos (`modal_proto/api.proto`
 * and `task_command_router.proto`, the subset in fixtures/modal-double*.proto), served over gRPC
 * on loopback only. Modal has no REST API: its SDK speaks this.
 *
 * - The control plane (`modal.client.ModalClient`), each call with the token's id and secret in
 *   `x-modal-token-id`/`x-modal-token-secret`: an auth token (a JWT), the environment, the app,
 *   images built `FROM` a registry tag (pulled from the local registry), V2 sandboxes (the SDK's
 *   default: created with their env, their task and command router named in the answer; waited
 *   on, terminated), image lookup and delete, and the command router's address and JWT again.
 * - The command router (`modal.task_command_router.TaskCommandRouter`, on the same port: the SDK
 *   dials a loopback router without TLS), each call with that JWT: exec start, stdio read
 *   (streamed from an offset), stdin write (at an offset, with its end), wait, and a filesystem
 *   snapshot, which becomes an image (`docker commit`, without pausing: see the E2B double).
 *
 * Each sandbox is a container on the local engine; blocked networking is no network. Nothing here
 * is reached from outside the machine, and no request leaves it.
 */
import { createHash, randomBytes } from "node:crypto";
import { Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import Docker from "dockerode";
import { pullImage, removeLabelled } from "./double-engine.ts";

interface SandboxRecord {
  id: string;
  taskId: string;
  image: string;
  env: Record<string, string>;
  networkBlocked: boolean;
  tags: Record<string, string>;
  containerId: string;
  terminated: boolean;
}

interface ExecRecord {
  out: Buffer[][];
  done: boolean;
  code: number | null;
  signal: number | null;
  waiters: (() => void)[];
  stdin: NodeJS.WritableStream | null;
  stdinOffset: number;
}

export interface ModalDouble {
  /** The control plane (and router), plain gRPC on loopback. */
  url: string;
  /** The token as denv takes it: `id:secret`. */
  token: string;
  /** Every method called, by name. */
  seen: string[];
  sandboxes(): SandboxRecord[];
  /** Image ids the double holds, each with the engine's image it is. */
  images(): Map<string, string>;
  /** Router addresses answered from now are this one (a hostile provider); null: the double's. */
  routerUrl(url: string | null): void;
  close(): Promise<void>;
}

const LABEL = "dev.denv.modal-double";
const FIXTURES = fileURLToPath(new URL("./fixtures/", import.meta.url));

/** A JWT of the double's: header, a payload with `exp`, and a signature only the double checks. */
function jwt(subject: string): string {
  const part = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");
  return `${part({ alg: "none", typ: "JWT" })}.${part({ sub: subject, exp: Math.floor(Date.now() / 1000) + 3600 })}.${randomBytes(16).toString("base64url")}`;
}

type Call<T> = grpc.ServerUnaryCall<T, unknown>;
type Reply = grpc.sendUnaryData<unknown>;

export async function startModalDouble(): Promise<ModalDouble> {
  const docker = new Docker();
  const tokenId = `ak-${randomBytes(10).toString("hex")}`;
  const tokenSecret = `as-${randomBytes(16).toString("hex")}`;
  const label = randomBytes(6).toString("hex");
  const defs = protoLoader.loadSync(
    [`${FIXTURES}modal-double.proto`, `${FIXTURES}modal-double-router.proto`],
    {
      longs: Number,
      defaults: true,
      oneofs: true,
    },
  );
  const pkg = grpc.loadPackageDefinition(defs) as any;
  const seen: string[] = [];
  const secrets = new Map<string, Record<string, string>>();
  const images = new Map<string, string>();
  const sandboxes = new Map<string, SandboxRecord>();
  const routerTokens = new Map<string, string>();
  const execs = new Map<string, ExecRecord>();
  const madeImages: string[] = [];
  let routerOverride: string | null = null;
  let port = 0;

  const fail = (reply: Reply, code: grpc.status, details: string) =>
    reply({ code, details } as grpc.ServiceError);

  /** Wraps a control-plane method: the token checked, the call recorded, errors answered. */
  const cp =
    <T>(name: string, fn: (req: T) => Promise<unknown> | unknown) =>
    async (call: Call<T>, reply: Reply) => {
      seen.push(name);
      const [id] = call.metadata.get("x-modal-token-id");
      const [secret] = call.metadata.get("x-modal-token-secret");
      if (id !== tokenId || secret !== tokenSecret)
        return fail(reply, grpc.status.UNAUTHENTICATED, "Token ID or secret is invalid");
      try {
        reply(null, await fn(call.request));
      } catch (err) {
        const e = err as { code?: grpc.status; message: string };
        fail(reply, e.code ?? grpc.status.INTERNAL, e.message);
      }
    };
  const grpcError = (code: grpc.status, message: string) => Object.assign(new Error(message), { code });

  const bySandbox = (id: string) => {
    const s = sandboxes.get(id);
    if (!s) throw grpcError(grpc.status.NOT_FOUND, `Sandbox ${id} not found`);
    return s;
  };
  const byTask = (taskId: string) => {
    const s = [...sandboxes.values()].find((x) => x.taskId === taskId);
    if (!s) throw grpcError(grpc.status.NOT_FOUND, `Task ${taskId} not found`);
    if (s.terminated) throw grpcError(grpc.status.FAILED_PRECONDITION, `Task ${taskId} has finished`);
    return s;
  };
  const terminated = { status: 3, exception: "", exitcode: 0 };
  /** A sandbox's env: its secrets' and the env maps the request carries, in order. */
  const envOf = (sources: { secretId?: string; env?: { contents: Record<string, string> } }[]) => {
    const env: Record<string, string> = {};
    for (const source of sources) {
      if (source.env) Object.assign(env, source.env.contents);
      else if (source.secretId) {
        const values = secrets.get(source.secretId);
        if (!values) throw grpcError(grpc.status.NOT_FOUND, `Secret ${source.secretId} not found`);
        Object.assign(env, values);
      }
    }
    return env;
  };
  /** The command router's address and a JWT for one task. */
  const routerAccess = (taskId: string) => {
    const token = jwt(taskId);
    routerTokens.set(token, taskId);
    return { jwt: token, url: routerOverride ?? `https://127.0.0.1:${port}` };
  };

  const server = new grpc.Server();
  server.addService(pkg.modal.client.ModalClient.service, {
    AuthTokenGet: cp("AuthTokenGet", () => ({ token: jwt(tokenId) })),
    EnvironmentGetOrCreate: cp("EnvironmentGetOrCreate", () => ({
      environmentId: "en-double",
      metadata: { name: "main", settings: { imageBuilderVersion: "2025.06", webhookSuffix: "" } },
    })),
    AppGetOrCreate: cp("AppGetOrCreate", (r: { appName: string }) => ({
      appId: `ap-${createHash("sha256").update(r.appName).digest("hex").slice(0, 20)}`,
    })),
    ImageGetOrCreate: cp("ImageGetOrCreate", async (r: { image: { dockerfileCommands: string[] } }) => {
      const commands = r.image?.dockerfileCommands ?? [];
      const from = /^FROM (\S+)$/.exec(commands[0] ?? "");
      if (!from || commands.length !== 1)
        throw grpcError(grpc.status.INVALID_ARGUMENT, "the double builds one FROM line and nothing else");
      const tag = from[1] as string;
      const id = `im-${createHash("sha256").update(tag).digest("hex").slice(0, 20)}`;
      try {
        await pullImage(docker, tag);
      } catch (err) {
        return { imageId: id, result: { status: 2, exception: `pulling ${tag}: ${(err as Error).message}` } };
      }
      images.set(id, tag);
      return { imageId: id, result: { status: 1 } };
    }),
    ImageFromId: cp("ImageFromId", (r: { imageId: string }) => {
      if (!images.has(r.imageId))
        throw grpcError(grpc.status.NOT_FOUND, `Could not find image with ID ${r.imageId}`);
      return { imageId: r.imageId };
    }),
    ImageDelete: cp("ImageDelete", async (r: { imageId: string }) => {
      const ref = images.get(r.imageId);
      if (!ref) throw grpcError(grpc.status.NOT_FOUND, `Could not find image with ID ${r.imageId}`);
      images.delete(r.imageId);
      if (madeImages.includes(ref))
        await docker
          .getImage(ref)
          .remove({ force: true })
          .catch(() => {});
      return {};
    }),
    SandboxCreateV2: cp(
      "SandboxCreateV2",
      async (r: {
        secretSources: { secretId?: string; env?: { contents: Record<string, string> } }[];
        definition: {
          entrypointArgs: string[];
          imageId: string;
          secretIds: string[];
          blockNetwork: boolean;
          networkAccess?: { networkAccessType: number } | null;
          workdir: string;
        };
      }) => {
        const d = r.definition;
        const image = images.get(d.imageId);
        if (!image) throw grpcError(grpc.status.NOT_FOUND, `Could not find image with ID ${d.imageId}`);
        const env = envOf(r.secretSources);
        const networkBlocked = d.blockNetwork || d.networkAccess?.networkAccessType === 2;
        // Not the 22 characters of a V1 id: the SDK reads a V2 sandbox from its id's shape.
        const id = `sb-${randomBytes(10).toString("hex")}`;
        // Without a command a Modal sandbox idles until its timeout.
        const cmd = d.entrypointArgs.length ? d.entrypointArgs : ["sh", "-c", "while :; do sleep 3600; done"];
        const container = await docker.createContainer({
          Image: image,
          Cmd: cmd,
          Entrypoint: [],
          User: "root",
          Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
          ...(d.workdir ? { WorkingDir: d.workdir } : {}),
          Labels: { [LABEL]: label },
          HostConfig: { NetworkMode: networkBlocked ? "none" : "bridge" },
        });
        await container.start();
        const taskId = `ta-${randomBytes(10).toString("hex")}`;
        sandboxes.set(id, {
          id,
          taskId,
          image,
          env,
          networkBlocked,
          tags: {},
          containerId: container.id,
          terminated: false,
        });
        return { sandboxId: id, taskId, commandRouterAccess: routerAccess(taskId) };
      },
    ),
    SandboxGetTaskIdV2: cp("SandboxGetTaskIdV2", (r: { sandboxId: string }) => {
      const s = bySandbox(r.sandboxId);
      return s.terminated ? { taskResult: terminated } : { taskId: s.taskId };
    }),
    SandboxWaitV2: cp("SandboxWaitV2", (r: { sandboxId: string }) => {
      const s = bySandbox(r.sandboxId);
      return s.terminated ? { result: terminated } : {};
    }),
    SandboxTerminateV2: cp("SandboxTerminateV2", async (r: { sandboxId: string }) => {
      const s = bySandbox(r.sandboxId);
      if (!s.terminated) {
        s.terminated = true;
        await docker
          .getContainer(s.containerId)
          .remove({ force: true })
          .catch(() => {});
      }
      return {};
    }),
    SandboxGetCommandRouterAccess: cp("SandboxGetCommandRouterAccess", (r: { sandboxId: string }) => {
      const s = bySandbox(r.sandboxId);
      if (s.terminated) throw grpcError(grpc.status.FAILED_PRECONDITION, `Sandbox ${s.id} has finished`);
      return routerAccess(s.taskId);
    }),
  });

  /** The task a router call is for, its JWT checked against it. */
  const routed = (name: string, call: { metadata: grpc.Metadata; request: { taskId: string } }) => {
    seen.push(name);
    const [auth] = call.metadata.get("authorization");
    const token = String(auth ?? "").replace(/^Bearer /, "");
    if (routerTokens.get(token) !== call.request.taskId)
      throw grpcError(grpc.status.UNAUTHENTICATED, "the router's token is not for this task");
    return byTask(call.request.taskId);
  };
  const execOf = (taskId: string, execId: string) => {
    const e = execs.get(`${taskId}/${execId}`);
    if (!e) throw grpcError(grpc.status.NOT_FOUND, `exec ${execId} not found`);
    return e;
  };
  const wake = (e: ExecRecord) => {
    for (const w of e.waiters.splice(0)) w();
  };
  const unary =
    <T extends { taskId: string }>(
      name: string,
      fn: (s: SandboxRecord, req: T) => Promise<unknown> | unknown,
    ) =>
    async (call: Call<T>, reply: Reply) => {
      try {
        const s = routed(name, call);
        reply(null, await fn(s, call.request));
      } catch (err) {
        const e = err as { code?: grpc.status; message: string };
        fail(reply, e.code ?? grpc.status.INTERNAL, e.message);
      }
    };

  server.addService(pkg.modal.task_command_router.TaskCommandRouter.service, {
    TaskExecStart: unary(
      "TaskExecStart",
      async (
        s,
        r: {
          taskId: string;
          execId: string;
          commandArgs: string[];
          timeoutSecs: number;
          workdir: string;
          secretSources: { secretId?: string; env?: { contents: Record<string, string> } }[];
        },
      ) => {
        const env = { ...s.env, ...envOf(r.secretSources) };
        const container = docker.getContainer(s.containerId);
        const exec = await container.exec({
          Cmd: r.commandArgs,
          Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
          ...(r.workdir ? { WorkingDir: r.workdir } : {}),
          AttachStdin: true,
          AttachStdout: true,
          AttachStderr: true,
        });
        const stream = await exec.start({ hijack: true, stdin: true });
        const record: ExecRecord = {
          out: [[], []],
          done: false,
          code: null,
          signal: null,
          waiters: [],
          stdin: stream,
          stdinOffset: 0,
        };
        execs.set(`${r.taskId}/${r.execId}`, record);
        const sink = (fd: 0 | 1) =>
          new Writable({
            write(chunk: Buffer, _enc: string, cb: () => void) {
              record.out[fd]?.push(chunk);
              wake(record);
              cb();
            },
          });
        docker.modem.demuxStream(stream, sink(0), sink(1));
        let timer: NodeJS.Timeout | undefined;
        if (r.timeoutSecs > 0)
          timer = setTimeout(async () => {
            // Past its timeout the command is ended, as Modal's is: by a SIGKILL.
            const pid = (await exec.inspect()).Pid;
            if (pid > 0) {
              record.signal = 9;
              try {
                process.kill(pid, "SIGKILL");
              } catch {}
            }
          }, r.timeoutSecs * 1000);
        stream.on("end", async () => {
          clearTimeout(timer);
          const info = await exec.inspect().catch(() => null);
          if (record.signal === null) record.code = info?.ExitCode ?? -1;
          record.done = true;
          wake(record);
        });
        return {};
      },
    ),
    TaskExecStdioRead: async (
      call: grpc.ServerWritableStream<
        { taskId: string; execId: string; offset: number; fileDescriptor: number },
        unknown
      >,
    ) => {
      try {
        routed("TaskExecStdioRead", call);
        const e = execOf(call.request.taskId, call.request.execId);
        const fd = call.request.fileDescriptor === 1 ? 1 : 0;
        let offset = Number(call.request.offset);
        let cancelled = false;
        call.on("cancelled", () => {
          cancelled = true;
          wake(e);
        });
        while (!cancelled) {
          const all = Buffer.concat(e.out[fd] ?? []);
          if (all.length > offset) {
            call.write({ data: all.subarray(offset) });
            offset = all.length;
            continue;
          }
          if (e.done) break;
          await new Promise<void>((resolve) => e.waiters.push(resolve));
        }
        call.end();
      } catch (err) {
        const e = err as { code?: grpc.status; message: string };
        call.destroy(Object.assign(new Error(e.message), { code: e.code ?? grpc.status.INTERNAL }));
      }
    },
    TaskExecStdinWrite: unary(
      "TaskExecStdinWrite",
      (_s, r: { taskId: string; execId: string; offset: number; data: Buffer; eof: boolean }) => {
        const e = execOf(r.taskId, r.execId);
        const offset = Number(r.offset);
        // A write the double has is not written again (the SDK resends on a retry).
        const fresh = r.data.subarray(Math.max(0, e.stdinOffset - offset));
        if (offset <= e.stdinOffset && fresh.length && e.stdin) {
          e.stdin.write(fresh);
          e.stdinOffset += fresh.length;
        }
        if (r.eof && e.stdin) {
          e.stdin.end();
          e.stdin = null;
        }
        return {};
      },
    ),
    TaskExecWait: unary("TaskExecWait", async (_s, r: { taskId: string; execId: string }) => {
      const e = execOf(r.taskId, r.execId);
      while (!e.done) await new Promise<void>((resolve) => e.waiters.push(resolve));
      return e.signal !== null ? { signal: e.signal } : { code: e.code };
    }),
    TaskSnapshotFilesystem: unary("TaskSnapshotFilesystem", async (s) => {
      const id = `im-${randomBytes(10).toString("hex")}`;
      const repo = "denv-modal-double-snapshot";
      await docker.getContainer(s.containerId).commit({ repo, tag: id, pause: false });
      const ref = `${repo}:${id}`;
      images.set(id, ref);
      madeImages.push(ref);
      return { imageId: id };
    }),
  });

  port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) =>
      err ? reject(err) : resolve(p),
    ),
  );

  return {
    url: `http://127.0.0.1:${port}`,
    token: `${tokenId}:${tokenSecret}`,
    seen,
    sandboxes: () => [...sandboxes.values()],
    images: () => new Map(images),
    routerUrl(url: string | null) {
      routerOverride = url;
    },
    async close() {
      for (const e of execs.values()) wake(e);
      server.forceShutdown();
      await removeLabelled(docker, LABEL, label);
      for (const ref of madeImages)
        await docker
          .getImage(ref)
          .remove({ force: true })
          .catch(() => {});
    },
  };
}
