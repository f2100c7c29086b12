/**
 * Files and commands as a framework author expects them, through the raw /v1 API on a real host:
 * writes and reads as the service's user (or the one asked for), parents made, a directory never
 * replaced by a file (nor a file by a directory), each failure its own error code in denv's words;
 * commands with the user's HOME, USER and LOGNAME, and timeouts that kill every process a command
 * started, setsid and double forks included.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import tar from "tar-stream";
import { type Lab, openLab } from "../harness/lab.ts";
import { waitFor } from "../harness/wait-for.ts";

let lab: Lab;
/** An image sandbox running as ubuntu (1000), as an agent's box does. */
let box: string;

type Entry = {
  name: string;
  body?: string;
  type?: "file" | "directory";
  mode?: number;
  uid?: number;
  gid?: number;
};

async function tarOf(entries: Entry[]): Promise<Uint8Array> {
  const pack = tar.pack();
  for (const e of entries) {
    if (e.type === "directory") pack.entry({ name: e.name, type: "directory", mode: e.mode ?? 0o755 });
    else pack.entry({ name: e.name, mode: e.mode ?? 0o644, uid: e.uid ?? 0, gid: e.gid ?? 0 }, e.body ?? "");
  }
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack) chunks.push(c as Buffer);
  return new Uint8Array(Buffer.concat(chunks));
}

async function filesOf(tarBytes: Buffer): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const extract = tar.extract();
  extract.on("entry", (header, stream, next) => {
    const chunks: Buffer[] = [];
    stream.on("data", (c) => chunks.push(c as Buffer));
    stream.on("end", () => {
      if (header.type === "file") out[header.name] = Buffer.concat(chunks).toString();
      next();
    });
  });
  await new Promise<void>((resolve, reject) => {
    extract.on("finish", resolve);
    extract.on("error", reject);
    extract.end(tarBytes);
  });
  return out;
}

const put = (env: string, path: string, body: Uint8Array, user?: string) =>
  lab.api(
    "PUT",
    `/v1/envs/${env}/files?path=${encodeURIComponent(path)}${user ? `&user=${user}` : ""}`,
    body,
  );
const get = (env: string, path: string, user?: string) =>
  lab.api("GET", `/v1/envs/${env}/files?path=${encodeURIComponent(path)}${user ? `&user=${user}` : ""}`);
async function sh(env: string, command: string, extra: Record<string, unknown> = {}) {
  const r = await lab.api("POST", `/v1/envs/${env}/exec`, { command, ...extra });
  assert.equal(r.status, 200, JSON.stringify(r.data));
  return r.data as { exit_code: number; stdout: string; stderr: string; timed_out: boolean };
}

/** An error body: its code, and a message with no engine text or container id in it. */
function refused(r: { status: number; data: any }, status: number, code: string) {
  assert.equal(r.status, status, JSON.stringify(r.data));
  assert.equal(r.data.error.code, code);
  assert.doesNotMatch(
    r.data.error.message,
    /HTTP code|no such container|[0-9a-f]{64}|Error response from daemon/,
  );
  return r.data.error.message as string;
}

before(async () => {
  lab = await openLab();
  const made = await lab.api("POST", "/v1/sandboxes", {
    image: "127.0.0.1:5000/denv/opsbox:bookworm",
    cmd: ["sleep", "infinity"],
    user: "1000:1000",
    volumes: ["/home/ubuntu"],
  });
  assert.equal(made.status, 201, JSON.stringify(made.data));
  box = made.data.id;
});

after(async () => {
  await lab?.close();
});

describe("files", () => {
  test("a file never replaces a directory: the agent's work stays, and the answer says why", async () => {
    await sh(box, "mkdir -p /home/ubuntu/work && echo kept > /home/ubuntu/work/notes.txt");
    const r = await put(box, "/home/ubuntu", await tarOf([{ name: "work", body: "flat" }]));
    const message = refused(r, 409, "is_directory");
    assert.match(message, /\/home\/ubuntu\/work is a directory/);
    assert.equal((await sh(box, "cat /home/ubuntu/work/notes.txt")).stdout, "kept\n");
  });

  test("an upload cut off mid-file keeps nothing and harms nothing: the next requests are answered", async () => {
    const { request } = await import("node:http");
    const whole = Buffer.from(await tarOf([{ name: "cut.bin", body: "y".repeat(3 * 1024 * 1024) }]));
    const u = new URL(`${lab.server.url}/v1/envs/${box}/files?path=/home/ubuntu/cutdir`);
    await new Promise<void>((resolve) => {
      const req = request(u, {
        method: "PUT",
        headers: {
          authorization: `Bearer ${lab.keyA}`,
          "content-type": "application/x-tar",
          "content-length": String(whole.length),
        },
      });
      req.on("error", () => resolve());
      req.on("response", () => resolve());
      // Half the tar, then the connection goes.
      req.write(whole.subarray(0, whole.length >> 1), () => setTimeout(() => req.destroy(), 200));
    });
    await waitFor(
      "the cut upload's file to be removed",
      async () => !(await sh(box, "test -e /home/ubuntu/cutdir/cut.bin && echo there")).stdout,
    );
    assert.equal((await sh(box, "ls /home/ubuntu/cutdir 2>/dev/null | wc -l")).stdout.trim(), "0");
    const ok = await put(box, "/home/ubuntu/cutdir", await tarOf([{ name: "after.txt", body: "fine" }]));
    assert.equal(ok.status, 200);
  });

  test("past the 64 MiB checked first, an entry the agent refuses ends the upload with its code, at once", async () => {
    await sh(box, "mkdir -p /home/ubuntu/late/work && echo kept > /home/ubuntu/late/work/x");
    // The refused entry comes after the spooled part, with 100 MiB still behind it.
    const archive = await tarOf([
      { name: "big.bin", body: "z".repeat(66 * 1024 * 1024) },
      { name: "work", body: "flat" },
      { name: "after.bin", body: "y".repeat(100 * 1024 * 1024) },
    ]);
    const r = await put(box, "/home/ubuntu/late", archive);
    refused(r, 409, "is_directory");
    assert.equal((await sh(box, "cat /home/ubuntu/late/work/x")).stdout, "kept\n");
  });

  test("nor a directory a file", async () => {
    await sh(box, "echo flat > /home/ubuntu/plain");
    const r = await put(box, "/home/ubuntu", await tarOf([{ name: "plain/inner.txt", body: "x" }]));
    refused(r, 409, "not_a_directory");
    assert.equal((await sh(box, "cat /home/ubuntu/plain")).stdout, "flat\n");
  });

  test("writes are the service's user's, parents made and owned by them too; root may be asked for", async () => {
    const r = await put(
      box,
      "/home/ubuntu/deep/er",
      await tarOf([{ name: "f.txt", body: "hi", uid: 0, gid: 0 }]),
    );
    assert.equal(r.status, 200, JSON.stringify(r.data));
    const owners = await sh(
      box,
      "stat -c '%u:%g %n' /home/ubuntu/deep /home/ubuntu/deep/er /home/ubuntu/deep/er/f.txt",
    );
    assert.deepEqual(owners.stdout.trim().split("\n"), [
      "1000:1000 /home/ubuntu/deep",
      "1000:1000 /home/ubuntu/deep/er",
      "1000:1000 /home/ubuntu/deep/er/f.txt",
    ]);
    // The agent's user can change what was uploaded for it.
    assert.equal(
      (await sh(box, "echo more >> /home/ubuntu/deep/er/f.txt && cat /home/ubuntu/deep/er/f.txt")).stdout,
      "himore\n",
    );
    const asRoot = await put(
      box,
      "/opt/rooted",
      await tarOf([{ name: "r.txt", body: "r", uid: 0, gid: 0 }]),
      "root",
    );
    assert.equal(asRoot.status, 200, JSON.stringify(asRoot.data));
    assert.equal((await sh(box, "stat -c %u:%g /opt/rooted/r.txt")).stdout, "0:0\n");
  });

  test("names with spaces, empty files and an overwrite", async () => {
    const first = await put(
      box,
      "/home/ubuntu/sp ace",
      await tarOf([{ name: "a b.txt", body: "one" }, { name: "empty" }]),
    );
    assert.equal(first.status, 200, JSON.stringify(first.data));
    const again = await put(box, "/home/ubuntu/sp ace", await tarOf([{ name: "a b.txt", body: "two" }]));
    assert.equal(again.status, 200, JSON.stringify(again.data));
    const files = await filesOf((await get(box, "/home/ubuntu/sp ace")).data as Buffer);
    assert.equal(files["sp ace/a b.txt"], "two");
    assert.equal(files["sp ace/empty"], "");
  });

  test("permissions hold: the user cannot read a 000 file nor write where it may not; root can", async () => {
    await sh(box, "echo secret > /home/ubuntu/locked && chmod 000 /home/ubuntu/locked");
    refused(await get(box, "/home/ubuntu/locked"), 403, "permission_denied");
    const asRoot = await get(box, "/home/ubuntu/locked", "root");
    assert.equal(asRoot.status, 200);
    assert.equal((await filesOf(asRoot.data as Buffer)).locked, "secret\n");
    const msg = refused(
      await put(box, "/etc/denv-test", await tarOf([{ name: "x", body: "x" }])),
      403,
      "permission_denied",
    );
    assert.match(msg, /\/etc\/denv-test/);
  });

  test("a missing path, and an unknown user, each say so", async () => {
    refused(await get(box, "/home/ubuntu/nothing-here"), 404, "not_found");
    const r = await put(box, "/tmp/x", await tarOf([{ name: "a", body: "a" }]), "nobody-such");
    const msg = refused(r, 400, "invalid_argument");
    assert.match(msg, /unable to find user nobody-such/);
  });
});

describe("stat, list, mkdir, remove, rename", () => {
  const api = (method: string, path: string, body?: unknown) =>
    lab.api(method, `/v1/envs/${box}${path}`, body);

  test("mkdir makes parents owned by the user; stat and list tell type, size, mode, owner and time", async () => {
    const made = await api("POST", "/files/mkdir", { path: "/home/ubuntu/tree/sub" });
    assert.deepEqual(made.data, { created: true });
    assert.deepEqual((await api("POST", "/files/mkdir", { path: "/home/ubuntu/tree/sub" })).data, {
      created: false,
    });
    await sh(
      box,
      "printf abc > /home/ubuntu/tree/sub/f.txt && chmod 640 /home/ubuntu/tree/sub/f.txt && ln -s /etc /home/ubuntu/tree/to-etc",
    );
    const st = await api("GET", "/files/stat?path=/home/ubuntu/tree/sub/f.txt");
    assert.equal(st.status, 200, JSON.stringify(st.data));
    assert.equal(st.data.type, "file");
    assert.equal(st.data.size, 3);
    assert.equal(st.data.mode, 0o640);
    assert.equal(st.data.owner, "ubuntu");
    assert.equal(st.data.group, "ubuntu");
    assert.ok(Math.abs(Date.parse(st.data.modified_at) - Date.now()) < 600_000);
    const one = await api("GET", "/files/list?path=/home/ubuntu/tree");
    assert.deepEqual(
      one.data.entries.map((e: any) => [e.path, e.type, e.link_target]),
      [
        ["/home/ubuntu/tree/sub", "directory", null],
        ["/home/ubuntu/tree/to-etc", "symlink", "/etc"],
      ],
    );
    const deep = await api("GET", "/files/list?path=/home/ubuntu/tree&depth=5");
    // The link is listed, never entered.
    assert.deepEqual(
      deep.data.entries.map((e: any) => e.name),
      ["sub", "f.txt", "to-etc"],
    );
    refused(await api("GET", "/files/list?path=/home/ubuntu/tree/sub/f.txt"), 409, "not_a_directory");
    refused(await api("GET", "/files/stat?path=/home/ubuntu/none"), 404, "not_found");
  });

  test("remove: a non-empty directory only when asked to recurse, and never through a link", async () => {
    await sh(
      box,
      "mkdir -p /home/ubuntu/gone/inner && echo x > /home/ubuntu/gone/inner/x && ln -s /home/ubuntu/keep /home/ubuntu/gone/link && mkdir -p /home/ubuntu/keep && echo k > /home/ubuntu/keep/k",
    );
    refused(await api("DELETE", "/files?path=/home/ubuntu/gone"), 409, "conflict");
    const r = await api("DELETE", "/files?path=/home/ubuntu/gone&recursive=true");
    assert.equal(r.status, 200, JSON.stringify(r.data));
    assert.equal(
      (await sh(box, "test -e /home/ubuntu/gone; echo $?; cat /home/ubuntu/keep/k")).stdout,
      "1\nk\n",
    );
    refused(await api("DELETE", "/files?path=/etc/hostname"), 403, "permission_denied");
    assert.equal((await api("DELETE", "/files?path=/home/ubuntu/keep/k&user=root")).status, 200);
  });

  test("rename moves, and refuses a file over a directory", async () => {
    await sh(box, "mkdir -p /home/ubuntu/mv/dir && echo m > /home/ubuntu/mv/a");
    assert.equal(
      (await api("POST", "/files/rename", { from: "/home/ubuntu/mv/a", to: "/home/ubuntu/mv/b" })).status,
      200,
    );
    assert.equal((await sh(box, "cat /home/ubuntu/mv/b")).stdout, "m\n");
    refused(
      await api("POST", "/files/rename", { from: "/home/ubuntu/mv/b", to: "/home/ubuntu/mv/dir" }),
      409,
      "is_directory",
    );
    refused(
      await api("POST", "/files/rename", { from: "/home/ubuntu/mv/none", to: "/home/ubuntu/mv/c" }),
      404,
      "not_found",
    );
  });
});

describe("the CLI", () => {
  test("denv files mkdir, put, ls, stat, mv and rm, as the user", async () => {
    const { execFile } = await import("node:child_process");
    const { promisify } = await import("node:util");
    const { mkdtempSync, writeFileSync } = await import("node:fs");
    const { join } = await import("node:path");
    const { tmpdir } = await import("node:os");
    // Run apart from this process's event loop: the server answering it lives here.
    const denv = async (...args: string[]) =>
      (
        await promisify(execFile)(
          process.execPath,
          [join(import.meta.dirname, "../../packages/cli/bin/denv.js"), ...args],
          {
            encoding: "utf8",
            env: { ...process.env, DENV_SERVER: lab.server.url, DENV_API_KEY: lab.keyA, DENV_NO_STDIN: "1" },
          },
        )
      ).stdout;
    await denv("files", "mkdir", box, "/home/ubuntu/cli/a");
    const local = mkdtempSync(join(tmpdir(), "denv-cli-"));
    writeFileSync(join(local, "n.txt"), "note\n");
    await denv("files", "put", box, join(local, "n.txt"), "/home/ubuntu/cli/a/n.txt");
    const listed = JSON.parse(await denv("files", "ls", box, "/home/ubuntu/cli", "--depth", "2", "--json"));
    assert.deepEqual(
      listed.entries.map((e: any) => [e.name, e.type, e.owner]),
      [
        ["a", "directory", "ubuntu"],
        ["n.txt", "file", "ubuntu"],
      ],
    );
    assert.equal(JSON.parse(await denv("files", "stat", box, "/home/ubuntu/cli/a/n.txt", "--json")).size, 5);
    await denv("files", "mv", box, "/home/ubuntu/cli/a/n.txt", "/home/ubuntu/cli/m.txt");
    await denv("files", "rm", box, "-r", "/home/ubuntu/cli/a");
    assert.deepEqual(
      JSON.parse(await denv("files", "ls", box, "/home/ubuntu/cli", "--json")).entries.map(
        (e: any) => e.name,
      ),
      ["m.txt"],
    );
    // A tree with a file larger than a message ever was (100 MiB) goes each way as a stream.
    const { createHash, randomBytes } = await import("node:crypto");
    const { mkdirSync, readFileSync } = await import("node:fs");
    mkdirSync(join(local, "tree", "deep"), { recursive: true });
    const big = randomBytes(100 * 1024 * 1024);
    writeFileSync(join(local, "tree", "deep", "big.bin"), big);
    writeFileSync(join(local, "tree", "small.txt"), "small\n");
    const sent = await promisify(execFile)(
      process.execPath,
      [
        join(import.meta.dirname, "../../packages/cli/bin/denv.js"),
        "files",
        "put",
        box,
        join(local, "tree"),
        "/home/ubuntu/cli/tree",
      ],
      {
        encoding: "utf8",
        env: { ...process.env, DENV_SERVER: lab.server.url, DENV_API_KEY: lab.keyA, DENV_NO_STDIN: "1" },
      },
    );
    // Its progress, off a terminal: a line per tenth, ending at the whole (the files' 100 MiB).
    assert.ok((sent.stderr.match(/\/101 MiB sent\n/g) ?? []).length >= 5, sent.stderr);
    assert.match(sent.stderr, /\[#{20}\] 101\/101 MiB sent\n/);
    const back = mkdtempSync(join(tmpdir(), "denv-cli-back-"));
    await denv("files", "get", box, "/home/ubuntu/cli/tree", `${back}/`);
    // A file's get knows its size beforehand, and says how far it is.
    const got = await promisify(execFile)(
      process.execPath,
      [
        join(import.meta.dirname, "../../packages/cli/bin/denv.js"),
        "files",
        "get",
        box,
        "/home/ubuntu/cli/tree/deep/big.bin",
        `${back}/one.bin`,
      ],
      {
        encoding: "utf8",
        env: { ...process.env, DENV_SERVER: lab.server.url, DENV_API_KEY: lab.keyA, DENV_NO_STDIN: "1" },
      },
    );
    assert.match(got.stderr, /\[#{20}\] 100\/100 MiB received\n/);
    const digest = (b: Buffer) => createHash("sha256").update(b).digest("hex");
    assert.equal(digest(readFileSync(join(back, "tree", "deep", "big.bin"))), digest(big));
    assert.equal(readFileSync(join(back, "tree", "small.txt"), "utf8"), "small\n");
    // denv exec streams piped stdin to the command and its output back.
    const { spawn } = await import("node:child_process");
    const child = spawn(
      process.execPath,
      [
        join(import.meta.dirname, "../../packages/cli/bin/denv.js"),
        "exec",
        box,
        "--",
        "sh",
        "-c",
        "sha256sum | cut -c1-64",
      ],
      { env: { ...process.env, DENV_SERVER: lab.server.url, DENV_API_KEY: lab.keyA } },
    );
    let out = "";
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
    });
    const exited = new Promise<number | null>((r) => child.once("exit", r));
    child.stdin.end(big);
    assert.equal(await exited, 0);
    assert.equal(out.trim(), digest(big));
  });
});

describe("exec", () => {
  test("a client that goes away mid-output takes the command with it (its output has no reader)", async () => {
    const ac = new AbortController();
    const res = await fetch(`${lab.server.url}/v1/envs/${box}/exec/stream`, {
      method: "POST",
      headers: { authorization: `Bearer ${lab.keyA}`, "content-type": "application/octet-stream" },
      body: '{"command": ["sh", "-c", "exec yes denv-endless"]}\n',
      signal: ac.signal,
    });
    assert.equal(res.status, 200);
    let got = 0;
    try {
      for await (const c of res.body as unknown as AsyncIterable<Uint8Array>) {
        got += c.length;
        if (got > 4 * 1024 * 1024) ac.abort();
      }
    } catch {
      // the abort
    }
    assert.ok(got > 4 * 1024 * 1024);
    const left = await waitFor("the aborted command to be killed", async () => {
      const n = (await sh(box, "ps -eo args | grep -c '^yes denv-endless' || true")).stdout.trim();
      return n === "0" ? n : undefined;
    });
    assert.equal(left, "0", "the command was killed once nobody read its output");
  });

  test("an output limit says exactly how much was dropped", async () => {
    const r = await lab.api("POST", `/v1/envs/${box}/exec`, {
      command: "head -c 5000 /dev/zero; head -c 300 /dev/zero >&2",
      max_output_bytes: 1000,
    });
    assert.equal(r.status, 200, JSON.stringify(r.data));
    assert.equal(r.data.stdout.length, 1000);
    assert.equal(r.data.stdout_truncated, true);
    assert.equal(r.data.stdout_dropped_bytes, 4000);
    assert.equal(r.data.stderr_truncated, false);
    assert.equal(r.data.stderr_dropped_bytes, 0);
  });

  test("HOME, USER and LOGNAME are the user's, and the request's env overrides them", async () => {
    const own = await sh(box, 'echo "$HOME $USER $LOGNAME"');
    assert.equal(own.stdout, "/home/ubuntu ubuntu ubuntu\n");
    const root = await sh(box, 'echo "$HOME $USER $LOGNAME"', { user: "root" });
    assert.equal(root.stdout, "/root root root\n");
    const over = await sh(box, 'echo "$HOME $USER"', { env: { HOME: "/tmp", USER: "someone" } });
    assert.equal(over.stdout, "/tmp someone\n");
    // bash as the user starts without complaining about another user's profile.
    const bash = await sh(box, "bash -lc 'echo ok'");
    assert.equal(bash.stderr, "");
  });

  test("a timeout kills every process the command started, setsid and double forks included", async () => {
    const r = await sh(
      box,
      "setsid sleep 901 & (sleep 902 &) ; nohup sh -c 'sleep 903' >/dev/null 2>&1 & sleep 904",
      { timeout_ms: 1500 },
    );
    assert.equal(r.timed_out, true);
    assert.equal(r.exit_code, 137);
    const left = await sh(box, "ps -eo args | grep -c '^sleep 90[1-4]' || true");
    assert.equal(left.stdout.trim(), "0");
  });
});
