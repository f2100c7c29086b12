/**
 * The egress probe as a proof, against real namespaces: a slow but reachable target (a listener
 * whose accept queue is full, so the probe's first SYN is dropped and only its retransmission a
 * second later is answered) is reachable, not "blocked" by impatience; a namespace with no route is
 * blocked at once, with the kernel's answer as evidence; a probe that cannot run is an error, never
 * "blocked". Targets are this machine's own addresses only.
 */
import assert from "node:assert/strict";
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, before, test } from "node:test";
import { hostAddress, loopbackOnly, MIN_WAIT_MS, probeEgress } from "@denv/denvd";
import Docker from "dockerode";
import { removeLabelled } from "../harness/engine.ts";
import { dockerBridgeAddress } from "../harness/test-host.ts";

const docker = new Docker();
const labels = { "dev.denv.test": `probe-${randomBytes(3).toString("hex")}` };
const IMAGE = "debian:bookworm";

async function container(networkMode: string): Promise<number> {
  const c = await docker.createContainer({
    Image: IMAGE,
    Cmd: ["sleep", "infinity"],
    Labels: labels,
    HostConfig: { NetworkMode: networkMode },
  });
  await c.start();
  return (await c.inspect()).State.Pid;
}

/**
 * A listener that is slow to answer: listen(0) with one connection left in its accept queue, so
 * the kernel drops new SYNs. Once told to go, it watches the kernel's count of SYNs dropped for a
 * full accept queue (TcpExt ListenOverflows) and, when the probe's first SYN has been dropped,
 * accepts that connection, so the queue has room for the retransmitted SYN a second later. Waiting
 * on the drop itself, not on a timer: on a busy machine the probe's first SYN came after a fixed
 * delay had run out, and the connect was fast. It keeps accepting afterwards.
 */
async function slowListener(host: string): Promise<{ port: number; proc: ChildProcess }> {
  const script = `
import socket, sys, time
def overflows():
    lines = open("/proc/net/netstat").read().splitlines()
    for names, values in zip(lines[::2], lines[1::2]):
        if names.startswith("TcpExt:"):
            return int(values.split()[names.split().index("ListenOverflows")])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((${JSON.stringify(host)}, 0)); s.listen(0)
filler = socket.create_connection((${JSON.stringify(host)}, s.getsockname()[1]))
print(s.getsockname()[1], flush=True)
sys.stdin.readline()
seen = overflows()
while overflows() == seen:
    time.sleep(0.01)
while True:
    c, _ = s.accept(); print("accepted", flush=True)
`;
  const proc = spawn("python3", ["-c", script], { stdio: ["pipe", "pipe", "inherit"] });
  const lines = createInterface({ input: proc.stdout as NodeJS.ReadableStream });
  const port = await new Promise<number>((resolve, reject) => {
    lines.once("line", (l) => resolve(Number(l)));
    proc.once("exit", (code) => reject(new Error(`the listener exited (${code})`)));
  });
  return { port, proc };
}

before(async () => {
  await removeLabelled(docker, labels);
});

after(async () => {
  await removeLabelled(docker, labels);
});

test("a target that answers only after a dropped SYN's retransmission is reachable, not blocked", async () => {
  const pid = await container("bridge");
  const host = dockerBridgeAddress();
  const { port, proc } = await slowListener(host);
  try {
    proc.stdin?.write("go\n"); // the listener waits for the probe's first SYN to be dropped
    const ev = await probeEgress(pid, { host, port });
    assert.equal(ev.outcome, "connected", JSON.stringify(ev));
    assert.equal(ev.result, "reachable");
    assert.ok((ev.wait_ms ?? 0) >= MIN_WAIT_MS, JSON.stringify(ev));
    // The premise: the connect was slow (answered by the retransmission, a second after the first SYN).
    assert.ok(ev.ms >= 900, `the target answered after ${ev.ms} ms: not the slow target this test needs`);
  } finally {
    proc.kill();
  }
});

test("a namespace with no route to the target is blocked at once, the kernel's answer kept", async () => {
  const pid = await container("none");
  const ev = await probeEgress(pid, { host: dockerBridgeAddress(), port: 9 });
  assert.equal(ev.result, "blocked", JSON.stringify(ev));
  assert.equal(ev.outcome, "no_route");
  assert.match(ev.route ?? "", /unreachable/i);
  assert.equal(ev.wait_ms, undefined, "no silence was waited for");
});

test("a reachable target that refuses is reachable", async () => {
  const pid = await container("bridge");
  // Port 9 on the host's bridge address: nothing listens, the host answers with a reset.
  const ev = await probeEgress(pid, { host: dockerBridgeAddress(), port: 9 });
  assert.equal(ev.outcome, "refused", JSON.stringify(ev));
  assert.equal(ev.result, "reachable");
});

test("the probe's shell reads none of the host's start-up files, whatever denvd's environment", async () => {
  // Bash reads ~/.bashrc when not interactive if its stdin is a socket (Node's child pipes are) and
  // it is a top-level shell: denvd under systemd has no SHLVL. A host's .bashrc that is slow (pyenv
  // waiting on a stale lock made every probe take 60 s) or loud must not reach the probe.
  const home = mkdtempSync(join(tmpdir(), "probe-home-"));
  const marker = join(home, "bashrc-ran");
  writeFileSync(join(home, ".bashrc"), `touch ${marker}\n`);
  const saved = { HOME: process.env.HOME, SHLVL: process.env.SHLVL };
  process.env.HOME = home;
  process.env.SHLVL = "0";
  try {
    const pid = await container("bridge");
    const ev = await probeEgress(pid, { host: dockerBridgeAddress(), port: 9 });
    assert.equal(ev.result, "reachable");
    assert.equal(existsSync(marker), false, "the probe's bash read the host's ~/.bashrc");
  } finally {
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    rmSync(home, { recursive: true, force: true });
  }
});

test("a probe that cannot run is an error, never blocked", async () => {
  await assert.rejects(
    probeEgress(2 ** 22 + 12345, { host: dockerBridgeAddress(), port: 9 }),
    (e: Error & { code?: string }) => e.code === "unavailable" && /could not run/.test(e.message),
  );
});

test("the default target, this host's own address toward the world, is reachable with a route and not without", async () => {
  const address = await hostAddress();
  assert.ok(address, "this host has a route to the world's addresses");
  const reachable = await probeEgress(await container("bridge"), { host: address, port: 9 });
  assert.equal(reachable.result, "reachable", JSON.stringify(reachable));
  const none = await probeEgress(await container("none"), { host: address, port: 9 });
  assert.equal(none.outcome, "no_route", JSON.stringify(none));
});

test("a namespace with loopback alone is read from the host as blocked; any other interface sends it to the probes", async () => {
  const target = { host: "192.0.2.1", port: 9 };
  const pid = await container("none");
  const read = await loopbackOnly(pid, target);
  assert.equal(read?.result, "blocked", JSON.stringify(read));
  assert.deepEqual(read?.interfaces, ["lo"]);
  assert.equal(read?.ipv6?.addresses, 0);
  assert.equal(read?.ipv6?.result, "blocked");
  // A bridged namespace has eth0: not read as blocked.
  assert.equal(await loopbackOnly(await container("bridge"), target), null);
  // A device added inside (as a service with NET_ADMIN could): the namespace is no longer lo alone,
  // so the probes decide, not the read.
  execFileSync("nsenter", [
    `--net=/proc/${pid}/ns/net`,
    "--",
    "ip",
    "link",
    "add",
    "denvx0",
    "type",
    "veth",
    "peer",
    "name",
    "denvx1",
  ]);
  assert.equal(await loopbackOnly(pid, target), null);
  const probed = await probeEgress(pid, target);
  assert.equal(probed.interfaces, undefined, "the probes ran");
});

test("a target or address that is not plain IPv4 never reaches the probe's shell", async () => {
  const pid = await container("none");
  const marker = join(tmpdir(), `probe-injected-${randomBytes(3).toString("hex")}`);
  for (const host of [`127.0.0.1/9; touch ${marker} #`, "$(touch /tmp/x)", "localhost", ""])
    await assert.rejects(probeEgress(pid, { host, port: 9 }), /not IPv4:port/);
  await assert.rejects(probeEgress(pid, { host: "127.0.0.1", port: 70000 }), /not IPv4:port/);
  // The namespace's own address and the bridge's link-local come from the engine and the kernel;
  // one that is not an address is left out of the script (no interface, no connect).
  const ev = await probeEgress(
    pid,
    { host: "127.0.0.1", port: 9 },
    `1.2.3.4/*; touch ${marker}`,
    `fe80::1; touch ${marker}`,
  );
  assert.equal(ev.ipv6?.target, "none");
  assert.equal(existsSync(marker), false, "nothing in the inputs ran");
});
