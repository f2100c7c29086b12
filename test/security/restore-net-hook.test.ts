/**
 * CRIU's action script that gives a restored container its parent's addresses
 * (denv-restore-net, written by scripts/ensure-criu.sh) reads a list from the checkpoint's images
 * and runs `ip` in the new container's network namespace. Hostile lines — shell in an interface
 * name or an address, options smuggled as names, more fields — are skipped, never run; the shaped
 * lines are applied, and only inside that namespace. Run here against a namespace this test makes
 * (`unshare -n`), with a veth pair in it; the host's own addresses are read before and after.
 */
import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { waitFor } from "../harness/wait-for.ts";

const HOOK = "/var/lib/denv-host/criu/bin/denv-restore-net";
const PWNED = join(tmpdir(), `denv-hook-pwned-${process.pid}`);
let ns: ReturnType<typeof spawn>;
let images: string;

const inNs = (...args: string[]) =>
  execFileSync("nsenter", ["-t", String(ns.pid), "-n", ...args], { encoding: "utf8" });
const run = (action: string) =>
  execFileSync(HOOK, [], {
    env: {
      PATH: process.env.PATH ?? "",
      CRTOOLS_SCRIPT_ACTION: action,
      CRTOOLS_IMAGE_DIR: images,
      CRTOOLS_INIT_PID: String(ns.pid),
    },
    encoding: "utf8",
  });

before(() => {
  assert.ok(existsSync(HOOK), `${HOOK} (scripts/ensure-criu.sh writes it)`);
  ns = spawn("unshare", ["-n", "sleep", "600"], { stdio: "ignore" });
  images = mkdtempSync(join(tmpdir(), "denv-hook-"));
});

after(() => {
  ns?.kill("SIGKILL");
  rmSync(images, { recursive: true, force: true });
  rmSync(PWNED, { force: true });
});

test("the restore hook applies the list's shaped lines inside the namespace and runs nothing of the hostile ones", async () => {
  // The namespace exists once the child has entered it.
  await waitFor("the test's network namespace", inNsReady, { intervalMs: 5 });
  // A veth pair inside the namespace (this kernel has no dummy interfaces).
  inNs("ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1");
  inNs("ip", "link", "set", "eth0", "up");
  const hostAddrs = execFileSync("ip", ["-o", "-4", "addr"], { encoding: "utf8" });
  writeFileSync(
    join(images, "denv-addrs"),
    [
      "eth0 10.77.0.3 10.77.0.0/24",
      `eth0;touch${" "}${PWNED} 10.77.1.3 10.77.1.0/24`,
      `eth0 $(touch ${PWNED}) 10.77.2.0/24`,
      `eth0 10.77.3.3 10.77.3.0/24;touch`,
      "-all 10.77.4.3 10.77.4.0/24",
      "eth0 10.77.5.3 `touch`",
      `eth0 10.77.6.3 10.77.6.0/24 extra`,
      "",
    ].join("\n"),
  );
  run("setup-namespaces");
  const addrs = inNs("ip", "-o", "-4", "addr", "show", "dev", "eth0");
  const routes = inNs("ip", "-4", "route");
  assert.match(addrs, / 10\.77\.0\.3\/32 /);
  assert.match(routes, /^10\.77\.0\.0\/24 dev eth0/m);
  for (const n of [1, 2, 3, 4, 5, 6]) assert.doesNotMatch(addrs + routes, new RegExp(`10\\.77\\.${n}\\.`));
  assert.equal(existsSync(PWNED), false, "nothing in a line was run");
  // Until network-unlock, the namespace drops TCP coming in and the interface answers no ARP;
  // then both are as before.
  assert.match(inNs("iptables", "-w", "-S", "INPUT"), /denv-restore.*-j DROP/);
  assert.equal(inNs("cat", "/proc/sys/net/ipv4/conf/eth0/arp_ignore").trim(), "8");
  run("network-unlock");
  assert.doesNotMatch(inNs("iptables", "-w", "-S", "INPUT"), /denv-restore/);
  assert.equal(inNs("cat", "/proc/sys/net/ipv4/conf/eth0/arp_ignore").trim(), "0");
  // A dump's network-unlock (an interface that answers ARP) changes nothing.
  run("network-unlock");
  assert.equal(inNs("cat", "/proc/sys/net/ipv4/conf/eth0/arp_ignore").trim(), "0");
  // The host's own addresses are as they were.
  assert.equal(execFileSync("ip", ["-o", "-4", "addr"], { encoding: "utf8" }), hostAddrs);
});

function inNsReady(): boolean {
  try {
    return (
      execFileSync("readlink", [`/proc/${ns.pid}/ns/net`], { encoding: "utf8" }) !==
      execFileSync("readlink", ["/proc/self/ns/net"], { encoding: "utf8" })
    );
  } catch {
    return false;
  }
}
