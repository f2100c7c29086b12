/** Exec and files: commands and files in and out of an environment's service. */
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, join, posix } from "node:path";
import { Readable } from "node:stream";
import type { Command } from "commander";
import tar from "tar-stream";
import { printJson, UsageError } from "../output.ts";
import { envParam, run } from "./command-runner.ts";

export function registerIoCommands(program: Command): void {
  const exec = program
    .command("exec")
    .description("Run a command in an environment's service; its exit code passes through")
    .argument("<env>")
    .argument("<command...>", "after --")
    .option("--service <name>", "the service (default: the agent's)")
    .option("--user <user>", "run as this user")
    .option("--cwd <dir>", "working directory")
    .option("--timeout <ms>", "kill the command's process tree after this many ms")
    .option("--json", "print JSON (exit code, stdout, stderr)")
    .addHelpText(
      "after",
      '\nExample:\n  denv exec --service opsbox rollout-017 -- psql -c "select count(*) from orders"',
    );
  exec.action(
    run(
      exec,
      async (
        client,
        json,
        env: string,
        command: string[],
        o: { service?: string; user?: string; cwd?: string; timeout?: string },
      ) => {
        const stdin = process.stdin.isTTY || process.env.DENV_NO_STDIN ? undefined : await readStdinIfPiped();
        const body = {
          command,
          ...(o.service ? { service: o.service } : {}),
          ...(o.user ? { user: o.user } : {}),
          ...(o.cwd ? { cwd: o.cwd } : {}),
          ...(o.timeout ? { timeout_ms: Number(o.timeout) } : {}),
          ...(stdin?.length ? { stdin: stdin.toString("base64") } : {}),
          encoding: "base64" as const,
        };
        if (json) {
          const r = await client().call("postV1EnvsByIdExec", { params: envParam(env), body });
          const out = Buffer.from(r.stdout, "base64");
          const err = Buffer.from(r.stderr, "base64");
          printJson({ ...r, stdout: out.toString("utf8"), stderr: err.toString("utf8"), encoding: "utf8" });
          return r.exit_code;
        }
        // Output streams as the command writes it.
        const r = await client().execStream(env, body, (which, data) => {
          (which === "stdout" ? process.stdout : process.stderr).write(data);
        });
        if (r.timed_out)
          process.stderr.write(`denv: the command timed out after ${o.timeout} ms and was killed\n`);
        return r.exit_code;
      },
    ),
  );

  const files = program.command("files").description("Move files in and out of an environment's service");
  const put = files
    .command("put")
    .description("Copy a local file or directory to a path in the service")
    .argument("<env>")
    .argument("<local>")
    .argument("<remote>", "absolute path it lands at")
    .option("--service <name>", "the service (default: the agent's)")
    .option("--user <user>", "write as this user (default: the service's own); parents are made, owned by it")
    .option("--owner <uid:gid>", "owner of the files written (writes as root, unless --user says otherwise)")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExample:\n  denv files put rollout-017 --service opsbox ./fixtures /home/ubuntu/fixtures\n\nA file never replaces a directory, nor a directory a file: such a put is refused.",
    );
  put.action(
    run(
      put,
      async (
        client,
        json,
        env: string,
        local: string,
        remote: string,
        o: { service?: string; user?: string; owner?: string },
      ) => {
        if (!posix.isAbsolute(remote))
          throw new UsageError(`${remote} must be an absolute path in the service`);
        if (!existsSync(local)) throw new UsageError(`${local} does not exist`);
        const [uid = 0, gid = 0] = (o.owner ?? "0:0").split(":").map(Number);
        if (!Number.isInteger(uid) || !Number.isInteger(gid) || uid < 0 || gid < 0)
          throw new UsageError(`--owner ${o.owner} is not uid:gid`);
        const user = o.user ?? (o.owner ? "root" : undefined);
        const body = await tarOf(local, posix.basename(remote), uid, gid);
        const r = await client().call("putV1EnvsByIdFiles", {
          params: envParam(env),
          query: { service: o.service, path: posix.dirname(remote), ...(user ? { user } : {}) },
          body: new Uint8Array(body),
        });
        if (json) printJson(r);
        else process.stdout.write(`put ${local} → ${remote} (${r.entries} entries, ${r.bytes} bytes)\n`);
        return 0;
      },
    ),
  );
  const get = files
    .command("get")
    .description("Copy a path from the service to a local file or directory")
    .argument("<env>")
    .argument("<remote>")
    .argument("<local>", "a directory (ending in /, or existing) to copy into, or a file path")
    .option("--service <name>", "the service (default: the agent's)")
    .option("--user <user>", "read as this user (default: the service's own)")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExample:\n  denv files get rollout-017 --service opsbox /home/ubuntu/answer.txt ./out/",
    );
  get.action(
    run(
      get,
      async (
        client,
        json,
        env: string,
        remote: string,
        local: string,
        o: { service?: string; user?: string },
      ) => {
        const body = await client().call("getV1EnvsByIdFiles", {
          params: envParam(env),
          query: { service: o.service, path: remote, ...(o.user ? { user: o.user } : {}) },
        });
        const intoDir = local.endsWith("/") || (existsSync(local) && statSync(local).isDirectory());
        const written = await untar(
          Buffer.from(body),
          intoDir ? local : dirname(local),
          intoDir ? null : basename(local),
        );
        if (json) printJson({ ok: true, files: written });
        else process.stdout.write(`got ${remote} → ${written.join(", ")}\n`);
        return 0;
      },
    ),
  );
}

async function readStdinIfPiped(): Promise<Buffer | undefined> {
  if (process.stdin.isTTY) return undefined;
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/** A tar of a local file or directory whose top entry is named `top`. */
async function tarOf(local: string, top: string, uid: number, gid: number): Promise<Buffer> {
  const pack = tar.pack();
  const add = (path: string, name: string): void => {
    const st = statSync(path);
    if (st.isDirectory()) {
      pack.entry({ name, type: "directory", mode: st.mode & 0o7777, uid, gid });
      for (const child of readdirSorted(path)) add(join(path, child), `${name}/${child}`);
    } else if (st.isFile()) {
      pack.entry({ name, mode: st.mode & 0o7777, uid, gid }, readFileSync(path));
    }
  };
  add(local, top);
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

function readdirSorted(dir: string): string[] {
  return readdirSync(dir).sort();
}

/** Extracts files and directories (links and special files are skipped) under `into`. */
async function untar(body: Buffer, into: string, rename: string | null): Promise<string[]> {
  // Loaded here: @denv/denvd brings the Docker client, which every other command would pay for.
  const { checkEntryName } = await import("@denv/denvd");
  const written: string[] = [];
  const extract = tar.extract();
  extract.on("entry", (header, stream, next) => {
    const chunks: Buffer[] = [];
    stream.on("data", (c: unknown) => {
      chunks.push(c as Buffer);
    });
    stream.on("end", () => {
      try {
        let name = checkEntryName(header.name);
        if (rename) name = [rename, ...name.split("/").slice(1)].join("/");
        const target = join(into, name);
        if (header.type === "directory") mkdirSync(target, { recursive: true });
        else if (header.type === "file") {
          mkdirSync(dirname(target), { recursive: true });
          writeFileSync(target, Buffer.concat(chunks));
          written.push(target);
        }
        next();
      } catch (err) {
        next(err as Error);
      }
    });
  });
  await new Promise<void>((resolvePromise, reject) => {
    extract.on("finish", () => resolvePromise());
    extract.on("error", reject);
    Readable.from(body).pipe(extract);
  });
  return written;
}
