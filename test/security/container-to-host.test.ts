/**
 * Root in a container attacks the host through denvd (root on the host): links and FIFOs where
 * denvd used to read the container's files from the host, writes to the agent's run directory, an
 * impostor agent that takes over the channel, links planted on a path the API reads, and an agent
 * user that is root by another name. Each must fail safely and touch nothing outside the container.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import tar from "tar-stream";
import { type Lab, openLab } from "../harness/lab.ts";
import { waitFor } from "../harness/wait-for.ts";

let lab: Lab;
/** A sandbox whose container runs as root (the image's default user). */
let rootBox: string;
let other: string;
let work: string;

async function exec(id: string, command: string, user?: string) {
  const r = await lab.api("POST", `/v1/envs/${id}/exec`, { command, ...(user ? { user } : {}) });
  assert.equal(r.status, 200, JSON.stringify(r.data));
  return r.data as { exit_code: number; stdout: string; stderr: string };
}

async function sandbox(): Promise<string> {
  const sb = await lab.api("POST", "/v1/sandboxes", {
    image: "127.0.0.1:5000/denv/opsbox:bookworm",
    cmd: ["sleep", "infinity"],
  });
  assert.equal(sb.status, 201, JSON.stringify(sb.data));
  return sb.data.id;
}

/** The host directory denvd mounts at /.denv/run for a sandbox's one service. */
function runDirOf(envId: string): Promise<string[]> {
  return (async () => {
    const row = await lab.server.store
      .selectFrom("environments")
      .select("stack_id")
      .where("id", "=", envId)
      .executeTakeFirstOrThrow();
    const { AgentChannel } = await import("@denv/denvd");
    const key = AgentChannel.keyOf(row.stack_id as string, "main");
    return readdir(join(lab.host.stateDir, "agents", key));
  })();
}

function untar(
  buf: Buffer,
): Promise<{ name: string; type: string; linkname: string | null; body: string }[]> {
  return new Promise((resolve, reject) => {
    const out: { name: string; type: string; linkname: string | null; body: string }[] = [];
    const x = tar.extract();
    x.on("entry", (h, s, next) => {
      let body = "";
      s.on("data", (d: unknown) => {
        body += (d as Buffer).toString();
      });
      s.on("end", () => {
        out.push({ name: h.name, type: h.type ?? "file", linkname: h.linkname ?? null, body });
        next();
      });
    });
    x.on("finish", () => resolve(out));
    x.on("error", reject);
    x.end(buf);
  });
}

before(async () => {
  lab = await openLab();
  work = await mkdtemp(join(tmpdir(), "denv-sec-c2h-"));
  rootBox = await sandbox();
  other = await sandbox();
});

after(async () => {
  await lab?.close();
  await rm(work, { recursive: true, force: true });
});

describe("the agent channel", () => {
  test("commands run through the agent, which root in the container cannot redirect or write beside", async () => {
    const trapPath = join(work, "trap.sock");
    let trapped = 0;
    const trap: Server = createServer((s) => {
      trapped++;
      s.destroy();
    });
    await new Promise<void>((r) => trap.listen(trapPath, r));
    const r = await exec(
      rootBox,
      [
        "id -u",
        "touch /.denv/run/x; echo touch=$?",
        `ln -sf ${trapPath} /.denv/run/d.sock; echo link=$?`,
        "rm -f /.denv/run/d.sock; echo rm=$?",
        "mount -t tmpfs none /.denv/run 2>/dev/null; echo mount=$?",
        "cp /bin/sh /.denv/bin/denv-agent 2>/dev/null; echo bin=$?",
      ].join("; "),
    );
    assert.equal(r.stdout.split("\n")[0], "0", "the container runs as root");
    for (const what of ["touch", "link", "rm", "mount", "bin"])
      assert.match(r.stdout, new RegExp(`${what}=[1-9]`));
    // Nothing the container did appears on the host, and denvd still reaches the agent.
    assert.deepEqual(await runDirOf(rootBox), ["d.sock"]);
    const parent = await exec(rootBox, "tr '\\0' ' ' < /proc/$PPID/cmdline");
    assert.match(parent.stdout, /denv-agent/);
    trap.close();
    assert.equal(trapped, 0);
  });

  test("an impostor that takes the channel over is cut off at the frame bound; other sandboxes are untouched", async () => {
    const bin = join(work, "impostor");
    execFileSync("gcc", ["-O2", "-static", "-o", bin, join(import.meta.dirname, "fixtures", "impostor.c")]);
    const box = await sandbox();
    const pack = tar.pack();
    pack.entry({ name: "impostor", mode: 0o755 }, (await import("node:fs")).readFileSync(bin));
    pack.finalize();
    const chunks: Buffer[] = [];
    for await (const c of pack) chunks.push(c as Buffer);
    const put = await lab.api(
      "PUT",
      `/v1/envs/${box}/files?path=/work`,
      new Uint8Array(Buffer.concat(chunks)),
    );
    assert.equal(put.status, 200, JSON.stringify(put.data));
    // Root in the container starts a launcher in a session of its own (the agent kills a command's
    // process group when it ends: the command waits until the launcher has left it), sees it
    // running, then stops the real agent; the launcher starts the impostor, which dials in.
    // (The stopping command's own handler is a denv-agent process too: it dies with the rest, so
    // its answer is not looked at.)
    await lab.api("POST", `/v1/envs/${box}/exec`, {
      command:
        "setsid sh -c ': >/work/launched; while [ ! -e /work/go ]; do sleep 0.05; done; sleep 0.3; exec /work/impostor /.denv/run/d.sock' >/work/log 2>&1 < /dev/null & sleep 0.5",
    });
    await waitFor("the impostor's launcher to run", async () => {
      const up = await lab.api("POST", `/v1/envs/${box}/exec`, {
        command: "pgrep -f 'work/go' >/dev/null && echo up",
      });
      return up.data.stdout === "up\n";
    });
    await lab.api("POST", `/v1/envs/${box}/exec`, {
      command: "touch /work/go; pkill -f /.denv/bin/denv-agent",
    });
    await new Promise((r) => setTimeout(r, 600));
    const rssBefore = process.memoryUsage().rss;
    let answered: { status: number; data: any } | undefined;
    // Until the impostor is in, a command goes through the engine (the agent is not connected).
    for (let i = 0; i < 100; i++) {
      answered = await lab.api("POST", `/v1/envs/${box}/exec`, { command: "echo genuine" });
      if (answered.status !== 200) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.ok(
      answered && answered.status >= 500,
      `the impostor never answered: ${JSON.stringify(answered?.data)}`,
    );
    assert.equal(answered.data.error.code, "unavailable");
    assert.match(answered.data.error.message, /broke the protocol/);
    // Far less than the 4 GiB claimed, or even the 10 MiB sent.
    assert.ok(process.memoryUsage().rss - rssBefore < 64 * 1024 * 1024);
    const fine = await exec(other, "echo untouched");
    assert.equal(fine.stdout, "untouched\n");
    await lab.api("DELETE", `/v1/envs/${box}`);
  });
});

describe("users are resolved inside the container", () => {
  test("an /etc/passwd linked to a host file is read as the container sees it, never the host's", async () => {
    const hostPasswd = join(work, "passwd");
    await writeFile(hostPasswd, "evil:x:4242:4242::/:/bin/sh\n");
    await exec(rootBox, `cp /etc/passwd /tmp/passwd.bak; ln -sf ${hostPasswd} /etc/passwd`);
    const r = await exec(rootBox, "id -u", "evil");
    assert.equal(r.exit_code, 126);
    assert.match(r.stderr, /unable to find user evil: no matching entries in passwd file/);
    assert.equal((await exec(rootBox, "id -u", "4242")).stdout, "4242\n");
    await exec(rootBox, "rm /etc/passwd; cp /tmp/passwd.bak /etc/passwd");
  });

  test("an /etc/passwd that is a FIFO blocks neither that command nor any other", async () => {
    await exec(rootBox, "cp /etc/passwd /tmp/passwd.bak; rm /etc/passwd; mkfifo /etc/passwd");
    const [named, elsewhere] = await Promise.all([
      exec(rootBox, "id -u", "nobody"),
      exec(other, "id -un", "nobody"),
    ]);
    assert.equal(named.exit_code, 126);
    assert.match(named.stderr, /unable to find user nobody/);
    assert.equal(elsewhere.stdout, "nobody\n");
    await exec(rootBox, "rm /etc/passwd; cp /tmp/passwd.bak /etc/passwd");
  });

  test("a command run as a user gets that user's groups and home, as docker exec gives them", async () => {
    const r = await exec(rootBox, "id -u; id -g; echo $HOME", "ubuntu");
    assert.equal(r.stdout, "1000\n1000\n/home/ubuntu\n");
  });
});

describe("files read through the API follow no link", () => {
  test("a directory link the container planted is refused on the way, and archived as a link at the end", async () => {
    await exec(
      rootBox,
      "mkdir -p /root/private && echo TOPSECRET > /root/private/key && chmod -R go-rwx /root/private && ln -sfn /root/private /work/out",
    );
    const through = await lab.api("GET", `/v1/envs/${rootBox}/files?path=/work/out/key`);
    assert.equal(through.status, 400);
    assert.match(through.data.error.message, /\/work\/out is a symbolic link/);
    const link = await lab.api("GET", `/v1/envs/${rootBox}/files?path=/work/out`);
    assert.equal(link.status, 200);
    const entries = await untar(link.data as Buffer);
    assert.deepEqual(
      entries.map((e) => [e.name, e.type, e.linkname]),
      [["out", "symlink", "/root/private"]],
    );
    assert.ok(!(link.data as Buffer).includes("TOPSECRET"));
  });

  test("a directory is archived whole: files, links as links, FIFOs as entries never opened", async () => {
    await exec(
      rootBox,
      "mkdir -p /work/tree/sub && echo a > /work/tree/a.txt && echo b > /work/tree/sub/b.txt && ln -s /etc/shadow /work/tree/shadow && mkfifo /work/tree/pipe",
    );
    const r = await lab.api("GET", `/v1/envs/${rootBox}/files?path=/work/tree`);
    assert.equal(r.status, 200);
    const entries = await untar(r.data as Buffer);
    assert.deepEqual(
      entries.map((e) => [e.name, e.type]),
      [
        ["tree/", "directory"],
        ["tree/a.txt", "file"],
        ["tree/pipe", "fifo"],
        ["tree/shadow", "symlink"],
        ["tree/sub/", "directory"],
        ["tree/sub/b.txt", "file"],
      ],
    );
    assert.equal(entries.find((e) => e.name === "tree/a.txt")?.body, "a\n");
    const long = `/work/${"n".repeat(120)}`;
    await exec(rootBox, `echo long > ${long}`);
    const l = await untar((await lab.api("GET", `/v1/envs/${rootBox}/files?path=${long}`)).data as Buffer);
    assert.deepEqual(
      l.map((e) => [e.name, e.body]),
      [["n".repeat(120), "long\n"]],
    );
  });
});

describe("the agent is never root", () => {
  test("user +0 is refused at resolve", async () => {
    const compose = `x-denv:\n  kind: rl-environment\n  agent: { service: box }\nservices:\n  box:\n    image: 127.0.0.1:5000/denv/opsbox:bookworm\n    user: "+0"\n    command: [sleep, infinity]\n`;
    await lab.api("POST", "/v1/projects", { name: "plus-zero", kind: "rl-environment", source: "./x" });
    await lab.api("PUT", "/v1/projects/plus-zero/source", { compose });
    const d = (await lab.api("POST", "/v1/projects/plus-zero/deploy?wait=true", {})).data;
    assert.equal(d.status, "rolled_back");
    assert.match(d.phases[0].reason, /runs as root \(user: \+0\)/);
  });

  test("a user name that is uid 0 in the image is caught from the running process", async () => {
    const compose = `x-denv:\n  kind: rl-environment\n  agent: { service: box }\nservices:\n  box:\n    image: 127.0.0.1:5000/denv/test-toor:bookworm\n    user: toor\n    command: [sleep, infinity]\n`;
    await lab.api("POST", "/v1/projects", { name: "toor", kind: "rl-environment", source: "./x" });
    await lab.api("PUT", "/v1/projects/toor/source", { compose });
    const d = (await lab.api("POST", "/v1/projects/toor/deploy?wait=true", {})).data;
    assert.equal(d.status, "rolled_back");
    const start = d.phases.find((p: any) => p.name === "start");
    assert.equal(start.status, "failed");
    assert.match(start.reason, /runs as uid 0 \(user: toor\)/);
    const env = await lab.api("GET", `/v1/envs/${encodeURIComponent("toor/alpha")}`);
    assert.equal(env.data.status, "failed");
  });
});
