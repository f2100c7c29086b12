/**
 * Large transfers as a user makes them: a `denv server` and a `denvd` each in its own process (so
 * each one's peak memory is its own), an image sandbox, and files of any size streamed through the
 * API each way: generated as they are sent, checked as they are read, never held whole. `docker cp`
 * moves the same tar in the same run, as the peer. Used by the memory test and by the benchmark.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { type ClientRequest, request as httpRequest, type IncomingMessage } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";

const root = join(import.meta.dirname, "..");
const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";
const MIB = 1024 * 1024;

export interface TransferRig {
  /** On every engine object its denvd makes (label dev.denv.test). */
  runId: string;
  url: string;
  key: string;
  sandboxId: string;
  containerId: string;
  serverPid: number;
  denvdPid: number;
  close(): Promise<void>;
}

function startProcess(
  args: string[],
  env: Record<string, string>,
  ready: RegExp,
): Promise<[ChildProcess, string]> {
  // DENV_RIG_NODE_OPTIONS: extra node flags for the server and denvd (a CPU profile, say).
  const nodeArgs = process.env.DENV_RIG_NODE_OPTIONS?.split(" ").filter(Boolean) ?? [];
  const child = spawn(process.execPath, [...nodeArgs, ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  return new Promise((resolve, reject) => {
    let out = "";
    const onData = (d: Buffer) => {
      out += d.toString();
      const m = ready.exec(out);
      if (m) resolve([child, m[1] ?? m[0]]);
    };
    child.stdout?.on("data", onData);
    child.stderr?.on("data", onData);
    child.once("exit", (code) => reject(new Error(`${args.join(" ")} exited ${code}: ${out.slice(-2000)}`)));
  });
}

/** A server and a denvd, each its own process, and an image sandbox on them. */
export async function openTransferRig(): Promise<TransferRig> {
  const runId = `xfer-${randomBytes(3).toString("hex")}`;
  const dataDir = mkdtempSync(join(tmpdir(), "denv-xfer-"));
  const stateDir = join("/var/lib/denv-test", runId);
  const key = `dk_${runId}_${randomBytes(8).toString("hex")}`;
  const [server, url] = await startProcess(
    [
      join(root, "packages/cli/bin/denv.js"),
      "server",
      "--data-dir",
      dataDir,
      "--port",
      "0",
      "--allow-fetch",
      "127.0.0.1:5000",
    ],
    { DENV_ADMIN_KEY: key },
    /listening on (http:\/\/\S+)/,
  );
  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${url}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, ...(body ? { "content-type": "application/json" } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const data = (await res.json()) as Record<string, any>;
    if (!res.ok) throw new Error(`${method} ${path}: ${JSON.stringify(data)}`);
    return data;
  };
  let denvd: ChildProcess | null = null;
  try {
    const token = (await api("POST", "/v1/hosts/join-token")).token as string;
    const denvdMain = join(root, "packages/denvd/bin/denvd.js");
    const join_ = spawn(
      process.execPath,
      [
        denvdMain,
        "join",
        "--server",
        url,
        "--token",
        token,
        "--storage",
        "dir",
        "--state-dir",
        stateDir,
        "--name",
        runId,
      ],
      { stdio: "ignore" },
    );
    await new Promise((r, j) =>
      join_.once("exit", (c) => (c === 0 ? r(null) : j(new Error(`denvd join exited ${c}`)))),
    );
    [denvd] = await startProcess(
      [denvdMain, "run", "--state-dir", stateDir, "--label", `dev.denv.test=${runId}`],
      {},
      /Connected/,
    );
    const sb = await api("POST", "/v1/sandboxes", { image: OPSBOX, cmd: ["sleep", "infinity"] });
    const containerId = (await import("node:child_process"))
      .execFileSync("docker", ["ps", "-q", "--no-trunc", "--filter", `label=dev.denv.test=${runId}`], {
        encoding: "utf8",
      })
      .trim()
      .split("\n")[0] as string;
    const d = denvd;
    return {
      runId,
      url,
      key,
      sandboxId: sb.id,
      containerId,
      serverPid: server.pid as number,
      denvdPid: d.pid as number,
      close: async () => {
        await api("DELETE", `/v1/envs/${sb.id}`).catch(() => {});
        d.kill("SIGTERM");
        server.kill("SIGTERM");
        await Promise.all(
          [d, server].map((c) => new Promise((r) => (c.exitCode !== null ? r(null) : c.once("exit", r)))),
        );
        rmSync(dataDir, { recursive: true, force: true });
        rmSync(stateDir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    denvd?.kill("SIGKILL");
    server.kill("SIGKILL");
    throw err;
  }
}

/**
 * Starts a new peak for a process: its VmHWM becomes its resident memory now (Linux clear_refs 5),
 * so the next peakRssBytes is the peak of what happens in between. Returns the resident bytes now.
 */
export function resetPeakRss(pid: number): number {
  writeFileSync(`/proc/${pid}/clear_refs`, "5");
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) * 1024 : Number.NaN;
}

/** A process's peak resident memory (VmHWM) since it started or since resetPeakRss, in bytes. */
export function peakRssBytes(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) * 1024 : Number.NaN;
}

/**
 * A tar of one file of `bytes`, made as it is read: every MiB of the file starts with its index
 * (u64), so a reader can check each one landed where it belongs.
 */
export function patternTar(name: string, bytes: number): Readable {
  const header = Buffer.alloc(512);
  header.write(name, 0, 100, "utf8");
  header.write("0000644\0", 100);
  header.write("0000000\0", 108);
  header.write("0000000\0", 116);
  if (bytes <= 0o77777777777) header.write(`${bytes.toString(8).padStart(11, "0")}\0`, 124);
  else {
    // Past 8 GiB the octal field is too small: GNU's base-256 form (high bit set, big-endian).
    header[124] = 0x80;
    header.writeBigUInt64BE(BigInt(bytes), 128);
  }
  header.write(
    `${Math.floor(Date.now() / 1000)
      .toString(8)
      .padStart(11, "0")}\0`,
    136,
  );
  header.write("        ", 148);
  header.write("0", 156);
  header.write("ustar\0", 257);
  header.write("00", 263);
  let sum = 0;
  for (const b of header) sum += b;
  header.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148);
  async function* gen() {
    yield header;
    const block = Buffer.alloc(MIB);
    for (let off = 0, i = 0n; off < bytes; off += MIB, i++) {
      block.writeBigUInt64LE(i, 0);
      yield Buffer.from(block.subarray(0, Math.min(MIB, bytes - off)));
    }
    yield Buffer.alloc(((512 - (bytes % 512)) % 512) + 1024);
  }
  return Readable.from(gen(), { objectMode: false });
}

/** A tar header's size field: octal, or GNU base-256 when its high bit is set. */
function headerSize(h: Buffer): number {
  if ((h[124] as number) & 0x80) return Number(h.readBigUInt64BE(128));
  return Number.parseInt(h.subarray(124, 136).toString().replace(/\0.*$/, "").trim() || "0", 8);
}

/**
 * Counts a tar stream holding one patternTar file and checks every MiB's index. Headers before
 * the file's (a pax header, as tars of files over 8 GiB carry) are read and skipped.
 */
export function patternChecker(): Writable & { bytes: number; blocksChecked: number; wrong: number } {
  let offset = 0;
  /** Where the file's data starts, and its size, once its header was read. */
  let dataStart = -1;
  let fileBytes = 0;
  let head = Buffer.alloc(0);
  let paxSize: number | null = null;
  const w = new Writable({
    write(chunk: Buffer, _enc, cb) {
      const start = offset;
      const end = offset + chunk.length;
      offset = end;
      state.bytes = offset;
      if (dataStart < 0) {
        // Headers are collected until the file's own: pax records (type x) may come first.
        head = Buffer.concat([head, chunk]);
        let at = 0;
        while (dataStart < 0 && head.length >= at + 512) {
          const h = head.subarray(at, at + 512);
          const type = String.fromCharCode(h[156] as number);
          const size = headerSize(h);
          if (type === "x" || type === "g") {
            const body = at + 512;
            if (head.length < body + size) break;
            const m = /\d+ size=(\d+)\n/.exec(head.subarray(body, body + size).toString());
            if (m) paxSize = Number(m[1]);
            at = body + Math.ceil(size / 512) * 512;
          } else {
            dataStart = at + 512;
            fileBytes = paxSize ?? size;
          }
        }
        if (dataStart < 0) return cb();
        const rest = head.subarray(dataStart);
        head = Buffer.alloc(0);
        checkRange(dataStart, rest);
        return cb();
      }
      checkRange(start, chunk);
      cb();
    },
  });
  /** Checks the MiB starts that fall inside `data`, which begins at absolute offset `from`. */
  const checkRange = (from: number, data: Buffer) => {
    const end = from + data.length;
    let next = from <= dataStart ? dataStart : dataStart + Math.ceil((from - dataStart) / MIB) * MIB;
    for (; next + 8 <= end && next - dataStart < fileBytes; next += MIB) {
      if (data.readBigUInt64LE(next - from) !== BigInt((next - dataStart) / MIB)) state.wrong++;
      state.blocksChecked++;
    }
  };
  const state = Object.assign(w, { bytes: 0, blocksChecked: 0, wrong: 0 });
  return state;
}

/** PUT of a patternTar through the API; resolves with the answer and the time it took. */
export async function putThroughApi(
  rig: TransferRig,
  dir: string,
  name: string,
  bytes: number,
): Promise<{ ms: number; status: number; body: Record<string, any> }> {
  const t = performance.now();
  const res = await request(rig, "PUT", `/v1/envs/${rig.sandboxId}/files?path=${encodeURIComponent(dir)}`, {
    "content-type": "application/x-tar",
  });
  const [answer] = await Promise.all([res.answer, pipeline(patternTar(name, bytes), res.body)]);
  const chunks: Buffer[] = [];
  for await (const c of answer) chunks.push(c as Buffer);
  const body = JSON.parse(Buffer.concat(chunks).toString()) as Record<string, any>;
  return { ms: performance.now() - t, status: answer.statusCode ?? 0, body };
}

/**
 * A request by node:http, its body streamed as written: the client's own cost kept small (fetch's
 * web streams took a core's worth of this machine's two moving 10 GiB, beside the server and
 * denvd it measures).
 */
function request(
  rig: TransferRig,
  method: string,
  path: string,
  headers: Record<string, string> = {},
): { body: ClientRequest; answer: Promise<IncomingMessage> } {
  const body = httpRequest(`${rig.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${rig.key}`, ...headers },
  });
  const answer = new Promise<IncomingMessage>((resolve, reject) => {
    body.once("response", resolve).once("error", reject);
  });
  return { body, answer };
}

/** GET of a path through the API, checked as it streams in. */
export async function getThroughApi(
  rig: TransferRig,
  path: string,
): Promise<{ ms: number; status: number; bytes: number; blocksChecked: number; wrong: number }> {
  const t = performance.now();
  const res = request(rig, "GET", `/v1/envs/${rig.sandboxId}/files?path=${encodeURIComponent(path)}`);
  res.body.end();
  const answer = await res.answer;
  const check = patternChecker();
  await pipeline(answer, check);
  return {
    ms: performance.now() - t,
    status: answer.statusCode ?? 0,
    bytes: check.bytes,
    blocksChecked: check.blocksChecked,
    wrong: check.wrong,
  };
}

/** The peer: `docker cp` of the same tar into the container, from stdin. */
export async function dockerCpIn(
  containerId: string,
  dir: string,
  name: string,
  bytes: number,
): Promise<number> {
  const t = performance.now();
  const child = spawn("docker", ["cp", "-", `${containerId}:${dir}`], {
    stdio: ["pipe", "ignore", "inherit"],
  });
  const exited = new Promise<number | null>((r) => child.once("exit", r));
  await pipeline(patternTar(name, bytes), child.stdin);
  const code = await exited;
  if (code !== 0) throw new Error(`docker cp in exited ${code}`);
  return performance.now() - t;
}

/** The peer: `docker cp` of a path out of the container to stdout, checked as it streams. */
export async function dockerCpOut(
  containerId: string,
  path: string,
): Promise<{ ms: number; bytes: number; wrong: number }> {
  const t = performance.now();
  const child = spawn("docker", ["cp", `${containerId}:${path}`, "-"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const exited = new Promise<number | null>((r) => child.once("exit", r));
  const check = patternChecker();
  await pipeline(child.stdout, check);
  const code = await exited;
  if (code !== 0) throw new Error(`docker cp out exited ${code}`);
  return { ms: performance.now() - t, bytes: check.bytes, wrong: check.wrong };
}

/** Bytes of the pattern (a tar's worth of file data, no header), made as they are read. */
export function patternBytes(bytes: number): Readable {
  async function* gen() {
    const block = Buffer.alloc(MIB);
    for (let off = 0, i = 0n; off < bytes; off += MIB, i++) {
      block.writeBigUInt64LE(i, 0);
      yield Buffer.from(block.subarray(0, Math.min(MIB, bytes - off)));
    }
  }
  return Readable.from(gen(), { objectMode: false });
}

/**
 * POST /exec/stream: the request's line, then `stdinBytes` of the pattern as stdin; the answer's
 * frames (8-byte header: kind, 0, 0, 0, u32 length) read as they come, the output counted.
 */
export async function execStreamed(
  rig: TransferRig,
  request: Record<string, unknown>,
  stdinBytes: number,
): Promise<{
  ms: number;
  status: number;
  stdoutBytes: number;
  stderr: string;
  result: Record<string, any> | null;
  error: unknown;
}> {
  const t = performance.now();
  async function* body() {
    yield Buffer.from(`${JSON.stringify(request)}\n`);
    for await (const c of patternBytes(stdinBytes)) yield c as Buffer;
  }
  const res = await fetch(`${rig.url}/v1/envs/${rig.sandboxId}/exec/stream`, {
    method: "POST",
    headers: { authorization: `Bearer ${rig.key}`, "content-type": "application/octet-stream" },
    body: Readable.toWeb(Readable.from(body(), { objectMode: false })) as ReadableStream,
    duplex: "half",
  } as RequestInit);
  let stdoutBytes = 0;
  let stderr = "";
  let result: Record<string, any> | null = null;
  let error: unknown = null;
  if (res.status !== 200)
    return { ms: 0, status: res.status, stdoutBytes, stderr, result, error: await res.json() };
  let pending: Buffer = Buffer.alloc(0);
  let want = -1;
  let kind = 0;
  for await (const chunk of Readable.fromWeb(res.body as never)) {
    pending = pending.length ? Buffer.concat([pending, chunk as Buffer]) : (chunk as Buffer);
    for (;;) {
      if (want < 0) {
        if (pending.length < 8) break;
        kind = pending[0] as number;
        want = pending.readUInt32BE(4);
        pending = pending.subarray(8);
      }
      // Output is counted as it passes; only the small frames are kept whole.
      if (kind === 1 && pending.length) {
        const n = Math.min(want, pending.length);
        stdoutBytes += n;
        want -= n;
        pending = pending.subarray(n);
        if (want === 0) want = -1;
        if (want > 0) break;
        continue;
      }
      if (pending.length < want) break;
      const payload = pending.subarray(0, want);
      pending = pending.subarray(want);
      want = -1;
      if (kind === 2) stderr += payload.toString();
      else if (kind === 3) result = JSON.parse(payload.toString());
      else if (kind === 4) error = JSON.parse(payload.toString()).error;
    }
  }
  return { ms: performance.now() - t, status: res.status, stdoutBytes, stderr, result, error };
}
