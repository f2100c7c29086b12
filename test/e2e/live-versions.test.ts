/**
 * Live versions on the real engine with CRIU (issue 71): a snapshot that keeps every service's
 * processes beside its volumes, and forks that continue from the parent's memory on their own
 * volumes while the parent goes on separately; a cold fork starts afresh; what CRIU cannot take is
 * refused before anything is frozen, naming the service, the process and why, and best-effort
 * keeps that service disk-only.
 *
 * (In the compose files, each $ is written $$: compose interpolates the rest.)
 *
 * Each ticker holds a token it drew at its start in memory only and writes it with its count every
 * tick (whole: written beside and moved into place, so a read never finds it half-written): a fork whose file carries on with the parent's token runs the parent's process image (a
 * fresh start draws another).
 */
import assert from "node:assert/strict";
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  truncateSync,
} from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import type { StackRecord } from "@denv/denvd";
import { DenvError, type ResolvedSpec } from "@denv/protocol";
import { pinSpec, RegistryPinner, validateCompose } from "@denv/spec";
import { hostOp, openTestHost, type TestHost } from "../harness/test-host.ts";
import { elapse, waitFor } from "../harness/wait-for.ts";

const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";
const TICKER =
  't=$(cat /proc/sys/kernel/random/uuid); i=0; exec 3>>/data/ticks; while :; do i=$((i+1)); echo "$t $i" > /srv/count.new; mv /srv/count.new /srv/count; echo "$t $i" >&3; sleep 0.1; done';
const URING = `import ctypes, time
ctypes.CDLL(None).syscall(425, 4, (ctypes.c_char * 120)())
time.sleep(1e9)`;

/** Writes each line a connection sends to the volume with the connection's number, and answers. */
const SERVER = `import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 7000)); s.listen()
n = 0
def serve(c, k):
    f = c.makefile("rwb", buffering=0)
    for line in f:
        with open("/data/seen", "a") as out: out.write(f"c{k} {line.decode().strip()}\\n")
        f.write(b"ok\\n")
while True:
    c, _ = s.accept(); n += 1; threading.Thread(target=serve, args=(c, n), daemon=True).start()`;
/** Holds one connection to the server, sending its tag (a file in its layer) and a count; never reconnects. */
const CLIENT = `import socket, sys, time
while True:
    try: c = socket.create_connection(("db", 7000)); break
    except OSError: time.sleep(0.1)
f = c.makefile("rwb", buffering=0); i = 0
while True:
    i += 1
    try: tag = open("/srv/tag").read().strip()
    except OSError: tag = "parent"
    f.write(f"{tag} {i}\\n".encode())
    if f.readline() != b"ok\\n": sys.exit("the connection ended")
    time.sleep(0.1)`;

let host: TestHost;
let alpha: StackRecord;

async function specOf(compose: string): Promise<ResolvedSpec> {
  const r = validateCompose(compose, { env: {}, projectName: "live" });
  if (!r.ok) throw new Error(JSON.stringify(r.errors));
  return pinSpec(r.spec, new RegistryPinner());
}

async function deploy(compose: string, name: string): Promise<StackRecord> {
  const prepared = await hostOp(host.denvd, "prepare", {
    spec: await specOf(compose),
    name,
    operation_id: `op_${name}`,
  });
  await hostOp(host.denvd, "start", { stack_id: prepared.stack_id });
  return host.denvd.stack(prepared.stack_id);
}

async function read(stackId: string, service: string, path: string): Promise<string> {
  const r = await host.denvd.exec(stackId, service, { command: ["cat", path] });
  assert.equal(r.exitCode, 0, r.stderr.toString());
  return r.stdout.toString().trim();
}

/** The ticker's token and count, as its file says. */
async function tick(stackId: string): Promise<{ token: string; count: number }> {
  const [token = "", count = "0"] = (await read(stackId, "ticker", "/srv/count")).split(" ");
  return { token, count: Number(count) };
}

/** A compose file with the ticker on its volume, and the services given after it. */
const tickerCompose = (more = "") => `x-denv: { kind: service }
services:
  ticker:
    image: ${OPSBOX}
    command: ["sh", "-c", ${JSON.stringify(TICKER.replaceAll("$", "$$$$"))}]
    volumes: ["data:/data"]
${more}volumes:
  data: {}
`;

before(async () => {
  host = await openTestHost({});
  alpha = await deploy(tickerCompose(), "alpha");
  await waitFor("the ticker to tick", async () => (await tick(alpha.id)).count >= 3);
});

after(async () => {
  await host?.close();
});

test("a live snapshot keeps the ticker's processes and layer; a fork continues from its memory on its own volume", async () => {
  // A hostile layer: links out to the host's root and its passwd file, which the layer's save and
  // restore must carry as links and never follow.
  const passwdBefore = readFileSync("/etc/passwd", "utf8");
  const links = await host.denvd.exec(alpha.id, "ticker", {
    command: ["sh", "-c", "ln -s / /srv/root-link && ln -s /etc/passwd /srv/passwd-link"],
  });
  assert.equal(links.exitCode, 0, links.stderr.toString());
  const snap = await hostOp(host.denvd, "snapshot", { stack_id: alpha.id, live: "on" });
  const live = snap.evidence.live;
  assert.ok(live, JSON.stringify(snap.evidence));
  assert.ok((live.services.ticker?.checkpoint_bytes ?? 0) > 0, JSON.stringify(live));
  assert.ok((live.services.ticker?.layer_bytes ?? 0) > 0, JSON.stringify(live));
  assert.match(live.services.ticker?.digest ?? "", /^sha256:[0-9a-f]{64}$/);
  assert.deepEqual(live.skipped, {});
  // Root's alone: the images hold the processes' memory.
  const mode = statSync(`${host.stateDir}/live/${snap.version_id}/ticker/images`).mode & 0o777;
  assert.equal(mode, 0o700, mode.toString(8));
  const parentAt = await tick(alpha.id);

  const fork = await hostOp(host.denvd, "fork", {
    version_id: snap.version_id,
    name: "beta",
    operation_id: "op_beta",
  });
  assert.deepEqual(fork.evidence.live, { restored: ["ticker"], started: {} });
  const forkLinks = await host.denvd.exec(fork.stack_id, "ticker", {
    command: ["readlink", "/srv/root-link", "/srv/passwd-link"],
  });
  assert.equal(forkLinks.stdout.toString(), "/\n/etc/passwd\n", "the links came over as links");
  assert.equal(readFileSync("/etc/passwd", "utf8"), passwdBefore, "the host's file is untouched");
  // The restored process keeps writing the token it drew in the parent, counting on from there.
  const first = await tick(fork.stack_id);
  assert.equal(first.token, parentAt.token, "the fork runs the parent's process, not a fresh start");
  await waitFor("the fork to tick", async () => (await tick(fork.stack_id)).count > first.count);
  // It appends to the file it held open in the volume: the fork's copy, not the parent's (a line
  // written there by hand is followed by the process's next ones, and the parent's has none of it).
  const mark = await host.denvd.exec(fork.stack_id, "ticker", {
    command: ["sh", "-c", "echo fork-mark >> /data/ticks"],
  });
  assert.equal(mark.exitCode, 0);
  const after = await waitFor("the fork's process to append past the mark", async () => {
    const rest = (await read(fork.stack_id, "ticker", "/data/ticks")).split("fork-mark\n")[1];
    return rest?.trim() ? rest.trim().split("\n") : null;
  });
  assert.ok(
    after.every((l) => l.startsWith(`${parentAt.token} `)),
    after.join("\n"),
  );
  assert.ok(!(await read(alpha.id, "ticker", "/data/ticks")).includes("fork-mark"));
  // The parent goes on by itself, with the same token.
  const parentNow = await tick(alpha.id);
  assert.equal(parentNow.token, parentAt.token);
  assert.ok(parentNow.count >= parentAt.count);

  // A cold fork of the same version starts the ticker afresh: another token.
  const cold = await hostOp(host.denvd, "fork", {
    version_id: snap.version_id,
    name: "gamma",
    operation_id: "op_gamma",
    cold: true,
  });
  await waitFor(
    "the cold fork's ticker to draw its own token",
    async () => (await tick(cold.stack_id)).token !== parentAt.token,
  );
  assert.deepEqual(cold.evidence.live?.restored, []);

  // Forks of one version restored at once (a fan-out's) each carry on from its memory.
  const many = await Promise.all(
    [1, 2, 3].map((n) =>
      hostOp(host.denvd, "fork", {
        version_id: snap.version_id,
        name: `many-${n}`,
        operation_id: `op_many_${n}`,
      }),
    ),
  );
  for (const f of many) {
    assert.deepEqual(f.evidence.live?.restored, ["ticker"]);
    assert.equal((await tick(f.stack_id)).token, parentAt.token);
    await hostOp(host.denvd, "destroy", { stack_id: f.stack_id });
  }

  // The version's process images go with it.
  await hostOp(host.denvd, "destroy", { stack_id: fork.stack_id });
  await hostOp(host.denvd, "destroy", { stack_id: cold.stack_id });
  await hostOp(host.denvd, "delete_version", { version_id: snap.version_id });
  assert.equal(existsSync(`${host.stateDir}/live/${snap.version_id}`), false);
});

test("process images changed or cut short since the snapshot are refused by their digest, and the fork leaves nothing behind", async () => {
  const snap = await hostOp(host.denvd, "snapshot", { stack_id: alpha.id, live: "on" });
  const dir = `${host.stateDir}/live/${snap.version_id}/ticker`;
  const pages = readdirSync(`${dir}/images`).find((f) => f.startsWith("pages-"));
  assert.ok(pages, readdirSync(`${dir}/images`).join(" "));
  const refused = async (name: string) => {
    const stacks = host.denvd.stacks().length;
    await assert.rejects(
      hostOp(host.denvd, "fork", { version_id: snap.version_id, name, operation_id: `op_${name}` }),
      (err: unknown) => {
        assert.ok(err instanceof DenvError, String(err));
        assert.equal(err.code, "storage_error");
        assert.match(err.message, /service ticker's process images do not match their digest/);
        return true;
      },
    );
    assert.equal(host.denvd.stacks().length, stacks, "the failed fork left no stack");
  };
  // A byte added to the memory pages CRIU would load.
  const original = readFileSync(`${dir}/images/${pages}`);
  appendFileSync(`${dir}/images/${pages}`, "x");
  await refused("tampered");
  // The layer's tar cut short.
  truncateSync(`${dir}/images/${pages}`, original.length);
  truncateSync(`${dir}/layer.tar`, 512);
  await refused("truncated");
  // A cold fork reads no process image, and starts.
  const cold = await hostOp(host.denvd, "fork", {
    version_id: snap.version_id,
    name: "tamper-cold",
    operation_id: "op_tamper_cold",
    cold: true,
  });
  await hostOp(host.denvd, "destroy", { stack_id: cold.stack_id });
  await hostOp(host.denvd, "delete_version", { version_id: snap.version_id });
});

test("a connection one service holds to another goes on in a live fork, against the fork's copy, and across a pause", async () => {
  const stack = await deploy(
    `x-denv: { kind: service }
services:
  db:
    image: ${OPSBOX}
    command: ["python3", "-c", ${JSON.stringify(SERVER)}]
    volumes: ["seen:/data"]
  client:
    image: ${OPSBOX}
    command: ["python3", "-c", ${JSON.stringify(CLIENT)}]
    # Restored after the server, as it starts after it (see live-versions.md on a resume's order).
    depends_on: [db]
volumes:
  seen: {}
`,
    "conns",
  );
  const seen = (stackId: string) => read(stackId, "db", "/data/seen");
  await waitFor("the client to send", async () => (await seen(stack.id)).split("\n").length >= 3);
  const snap = await hostOp(host.denvd, "snapshot", { stack_id: stack.id, live: "on" });
  const fork = await hostOp(host.denvd, "fork", {
    version_id: snap.version_id,
    name: "conns-fork",
    operation_id: "op_conns_fork",
  });
  assert.deepEqual(fork.evidence.live?.restored, ["client", "db"]);
  const tag = await host.denvd.exec(fork.stack_id, "client", {
    command: ["sh", "-c", "echo fork > /srv/tag"],
  });
  assert.equal(tag.exitCode, 0, tag.stderr.toString());
  // The fork's client goes on over the connection it held (the server's first: c1, never a new
  // one) and reaches the fork's server, whose volume has its lines; the parent's has none.
  await waitFor("the fork's server to hear the fork's client", async () =>
    /^c1 fork \d+$/m.test(await seen(fork.stack_id)),
  );
  assert.doesNotMatch(await seen(fork.stack_id), /^c[2-9]/m, "the fork's client never reconnected");
  assert.doesNotMatch(await seen(stack.id), /fork/, "the parent's server never heard the fork");
  const parentCount = (await seen(stack.id)).split("\n").length;
  await waitFor(
    "the parent's client to go on",
    async () => (await seen(stack.id)).split("\n").length > parentCount,
  );

  // A pause keeps it too: after resume the same connection carries on.
  await hostOp(host.denvd, "pause", { stack_id: fork.stack_id });
  await hostOp(host.denvd, "unpause", { stack_id: fork.stack_id });
  const resumedAt = (await seen(fork.stack_id)).split("\n").length;
  await waitFor(
    "the resumed client to go on",
    async () => (await seen(fork.stack_id)).split("\n").length > resumedAt,
  );
  assert.doesNotMatch(await seen(fork.stack_id), /^c[2-9]/m, "the resumed client never reconnected");

  // A connection from outside the stack (a container of the test's own on the stack's network,
  // not one of its services) to the parent's server: a fork could not continue it, so a live
  // snapshot refuses that service, naming the peer; best-effort keeps it disk-only.
  const outsider = await host.docker.createContainer({
    Image: OPSBOX,
    Cmd: ["python3", "-c", CLIENT],
    HostConfig: { NetworkMode: host.denvd.stack(stack.id).network },
    NetworkingConfig: {
      EndpointsConfig: { [host.denvd.stack(stack.id).network]: { Aliases: ["outsider"] } },
    },
  });
  try {
    await outsider.start();
    await waitFor("the outsider to connect", async () => /^c2 /m.test(await seen(stack.id)));
    await assert.rejects(
      hostOp(host.denvd, "snapshot", { stack_id: stack.id, live: "on" }),
      (err: unknown) => {
        assert.ok(err instanceof DenvError, String(err));
        assert.equal(err.code, "not_supported");
        assert.match(
          err.message,
          /service db's process python3 \(pid \d+\): it holds a TCP connection to [\d.]+:\d+, outside the stack/,
        );
        return true;
      },
    );
    const partial = await hostOp(host.denvd, "snapshot", { stack_id: stack.id, live: "best-effort" });
    assert.deepEqual(Object.keys(partial.evidence.live?.services ?? {}), ["client"]);
    assert.match(partial.evidence.live?.skipped.db ?? "", /outside the stack/);
    await hostOp(host.denvd, "delete_version", { version_id: partial.version_id });
    // A pause is not refused for it: the processes come back in the same containers, where the
    // other end may still be. The stack's own connection goes on after the resume.
    await hostOp(host.denvd, "pause", { stack_id: stack.id });
    await hostOp(host.denvd, "unpause", { stack_id: stack.id });
    const heard = (await seen(stack.id)).split("\n").length;
    await waitFor(
      "the client to go on after the resume",
      async () => (await seen(stack.id)).split("\n").length > heard,
    );
  } finally {
    await outsider.remove({ force: true });
  }
  for (const id of [fork.stack_id, stack.id]) await hostOp(host.denvd, "destroy", { stack_id: id });
  await hostOp(host.denvd, "delete_version", { version_id: snap.version_id });
});

test("a Python REPL's variables survive into live forks, and two sibling forks diverge from there", async () => {
  // The REPL reads what is written to its FIFO (a writer held open, so it never sees an end) and
  // prints into /srv/out, as an agent's code tool drives one.
  const stack = await deploy(
    `x-denv: { kind: service }
services:
  repl:
    image: ${OPSBOX}
    command: ["sh", "-c", "mkfifo /srv/in && (sleep infinity > /srv/in &) && exec python3 -u -i < /srv/in > /srv/out 2>&1"]
`,
    "repl",
  );
  const say = async (stackId: string, line: string) => {
    // The line as an argument, never parsed by a shell.
    const r = await host.denvd.exec(stackId, "repl", {
      command: ["sh", "-c", 'printf "%s\\n" "$1" > /srv/in', "say", line],
    });
    assert.equal(r.exitCode, 0, r.stderr.toString());
  };
  const printed = (stackId: string, value: string) =>
    waitFor(`the REPL of ${stackId} to print ${value}`, async () =>
      (await read(stackId, "repl", "/srv/out")).split(/\s|>>>/).includes(value),
    );
  await waitFor(
    "the REPL's FIFO",
    async () =>
      (await host.denvd.exec(stack.id, "repl", { command: ["test", "-p", "/srv/in"] })).exitCode === 0,
  );
  await say(stack.id, "x = 41; import uuid; drawn = uuid.uuid4().hex");
  await say(stack.id, "print(x + 1, drawn)");
  await printed(stack.id, "42");
  const drawn = (await read(stack.id, "repl", "/srv/out")).match(/42 ([0-9a-f]{32})/)?.[1] as string;
  assert.ok(drawn);
  const snap = await hostOp(host.denvd, "snapshot", { stack_id: stack.id, live: "on" });
  const [a, b] = await Promise.all(
    ["repl-a", "repl-b"].map((name) =>
      hostOp(host.denvd, "fork", { version_id: snap.version_id, name, operation_id: `op_${name}` }),
    ),
  );
  assert.ok(a && b);
  // Each fork's REPL has the parent's variables (the uuid it drew, never drawn again)...
  await say(a.stack_id, "print(x + 100, drawn)");
  await say(b.stack_id, "print(x + 200, drawn)");
  await printed(a.stack_id, "141");
  await printed(b.stack_id, "241");
  assert.match(await read(a.stack_id, "repl", "/srv/out"), new RegExp(`141 ${drawn}`));
  assert.match(await read(b.stack_id, "repl", "/srv/out"), new RegExp(`241 ${drawn}`));
  // ...and from there each goes its own way: a variable set in one is not in the other or the parent.
  await say(a.stack_id, 'y = "only-a"');
  await say(a.stack_id, "print(y)");
  await printed(a.stack_id, "only-a");
  await say(b.stack_id, 'print(globals().get("y", "no-y-here"))');
  await printed(b.stack_id, "no-y-here");
  await say(stack.id, 'print(globals().get("y", "no-y-in-parent"))');
  await printed(stack.id, "no-y-in-parent");
  for (const id of [a.stack_id, b.stack_id, stack.id]) await hostOp(host.denvd, "destroy", { stack_id: id });
  await hostOp(host.denvd, "delete_version", { version_id: snap.version_id });
});

test("with clock: frozen, a live fork's restored process reads the version's time while its parent's moves on", async () => {
  const CLOCKED = `import os, time
i = 0
while True:
    i += 1
    open("/srv/now.new", "w").write(f"{i} {time.time()}")
    os.replace("/srv/now.new", "/srv/now")
    time.sleep(0.1)`;
  const stack = await deploy(
    `x-denv: { kind: service, clock: frozen }
services:
  clocked:
    image: ${OPSBOX}
    command: ["python3", "-c", ${JSON.stringify(CLOCKED)}]
`,
    "clocked",
  );
  const now = async (stackId: string) => {
    const [i = "0", t = "0"] = (await read(stackId, "clocked", "/srv/now")).split(" ");
    return { i: Number(i), t: Number(t) };
  };
  await waitFor("the clocked process to write", async () => (await now(stack.id)).i >= 2);
  const snap = await hostOp(host.denvd, "snapshot", { stack_id: stack.id, live: "on" });
  const versionAtS = Date.parse(snap.evidence.clock?.at ?? "") / 1000;
  assert.ok(Number.isFinite(versionAtS), JSON.stringify(snap.evidence.clock));
  await elapse(
    4000,
    "the fork starts well after the snapshot, so the version's time is told from the time now",
  );
  const fork = await hostOp(host.denvd, "fork", {
    version_id: snap.version_id,
    name: "clocked-fork",
    operation_id: "op_clocked_fork",
  });
  assert.deepEqual(fork.evidence.live?.restored, ["clocked"]);
  const inLayer = await now(fork.stack_id);
  // A reading the restored process wrote in the fork (its count past what the layer held).
  const restored = await waitFor("the restored process to write", async () => {
    const n = await now(fork.stack_id);
    return n.i > inLayer.i ? n : null;
  });
  const parent = await now(stack.id);
  assert.ok(
    restored.t >= versionAtS - 1 && restored.t < versionAtS + 3,
    `the fork read ${restored.t}, the version's time is ${versionAtS}`,
  );
  assert.ok(parent.t >= restored.t + 3, `the parent read ${parent.t}, the fork ${restored.t}`);
  for (const id of [fork.stack_id, stack.id]) await hostOp(host.denvd, "destroy", { stack_id: id });
  await hostOp(host.denvd, "delete_version", { version_id: snap.version_id });
});

test("a process CRIU cannot take (io_uring) is refused before anything is frozen, naming it; best-effort keeps that service disk-only", async () => {
  const stack = await deploy(
    tickerCompose(`  ring:
    image: ${OPSBOX}
    command: ["python3", "-c", ${JSON.stringify(URING)}]
`),
    "rings",
  );
  await waitFor("the ticker to tick", async () => (await tick(stack.id)).count >= 1);
  await assert.rejects(hostOp(host.denvd, "snapshot", { stack_id: stack.id, live: "on" }), (err: unknown) => {
    assert.ok(err instanceof DenvError, String(err));
    assert.equal(err.code, "not_supported");
    assert.match(err.message, /service ring's process python3 \(pid \d+\): it uses io_uring/);
    return true;
  });
  assert.equal(host.denvd.versions().filter((v) => v.stackId === stack.id).length, 0, "no version was made");
  // The stack was never frozen and still runs.
  const before = (await tick(stack.id)).count;
  await waitFor("the ticker to go on", async () => (await tick(stack.id)).count > before);

  const snap = await hostOp(host.denvd, "snapshot", { stack_id: stack.id, live: "best-effort" });
  assert.deepEqual(Object.keys(snap.evidence.live?.services ?? {}), ["ticker"]);
  assert.match(snap.evidence.live?.skipped.ring ?? "", /io_uring/);
  const fork = await hostOp(host.denvd, "fork", {
    version_id: snap.version_id,
    name: "rings-fork",
    operation_id: "op_rings_fork",
  });
  assert.deepEqual(fork.evidence.live?.restored, ["ticker"]);
  assert.match(fork.evidence.live?.started.ring ?? "", /io_uring/);
});

test("pause keeps memory: every process stops with its memory on disk, stays so across a denvd restart, and resume carries on where it was", async () => {
  const before = await tick(alpha.id);
  const paused = await hostOp(host.denvd, "pause", { stack_id: alpha.id });
  assert.ok((paused.services.ticker?.checkpoint_bytes ?? 0) > 0, JSON.stringify(paused));
  const container = host.docker.getContainer(alpha.containers.ticker as string);
  assert.equal((await container.inspect()).State.Running, false, "the processes are gone while paused");
  await assert.rejects(hostOp(host.denvd, "pause", { stack_id: alpha.id }), /paused, not running/);
  // denvd restarts meanwhile: the paused stack stays paused (nothing starts it afresh), and the
  // process images of a live snapshot a kill cut off before its version was recorded are removed.
  const orphan = join(host.stateDir, "live", "ver_0000000000ff");
  mkdirSync(join(orphan, "ticker", "images"), { recursive: true });
  await host.denvd.close();
  host = await openTestHost({ stateDir: host.stateDir, runId: host.runId });
  assert.equal(host.denvd.stack(alpha.id).status, "paused");
  assert.equal(existsSync(orphan), false);
  assert.ok(host.denvd.lastReconcile.removed.includes("live/ver_0000000000ff"));
  assert.equal((await container.inspect()).State.Running, false);

  const resumed = await hostOp(host.denvd, "unpause", { stack_id: alpha.id });
  assert.ok(resumed.health.services.ticker, JSON.stringify(resumed));
  const after = await tick(alpha.id);
  assert.equal(after.token, before.token, "the same process, not a fresh start");
  assert.ok(after.count >= before.count, `${after.count} < ${before.count}`);
  await waitFor("the resumed ticker to go on", async () => (await tick(alpha.id)).count > after.count);
  await assert.rejects(hostOp(host.denvd, "unpause", { stack_id: alpha.id }), /running, not paused/);
});

test("a service running as another user is taken with the limits it set itself, and its fork goes on with them", async () => {
  // Where root lacks CAP_SYS_RESOURCE (these machines), CRIU reads another user's limits from
  // /proc through denv's wrapper; the process lowered its own, which its spec does not say.
  const stack = await deploy(
    `x-denv: { kind: service }
services:
  ticker:
    image: ${OPSBOX}
    user: "1000:1000"
    command: ["sh", "-c", ${JSON.stringify(`ulimit -n 321; ${TICKER.replaceAll("/srv/count", "/tmp/count").replace("/data/ticks", "/tmp/ticks")}`.replaceAll("$", "$$$$"))}]
`,
    "users",
  );
  const count = async (id: string) => (await read(id, "ticker", "/tmp/count")).split(" ");
  await waitFor(
    "the ticker to start",
    async () =>
      (await host.denvd.exec(stack.id, "ticker", { command: ["test", "-s", "/tmp/count"] })).exitCode === 0,
  );
  const snap = await hostOp(host.denvd, "snapshot", { stack_id: stack.id, live: "on" });
  assert.ok(snap.evidence.live?.services.ticker, JSON.stringify(snap.evidence));
  const [token] = await count(stack.id);
  const fork = await hostOp(host.denvd, "fork", {
    version_id: snap.version_id,
    name: "users-fork",
    operation_id: "op_users_fork",
  });
  await waitFor("the fork's ticker to go on", async () => (await count(fork.stack_id))[0] === token);
  const status = await read(fork.stack_id, "ticker", "/proc/1/status");
  assert.match(status, /^Uid:\s+1000\s+1000\s+1000/m, "restored as the user it ran as, never more");
  assert.match(await read(fork.stack_id, "ticker", "/proc/1/limits"), /^Max open files\s+321\s+321\s/m);
  await hostOp(host.denvd, "destroy", { stack_id: fork.stack_id });
  await hostOp(host.denvd, "delete_version", { version_id: snap.version_id });
});
