/**
 * Egress deny must hold over IPv6 too: a bridge keeps an IPv6 link-local address even on an internal
 * network, and the host answers on it. Deny containers have IPv6 off, the probe aims at the host's
 * link-local address on the bridge and records what it saw, and a compose file cannot turn IPv6
 * back on. A listener on this machine (all addresses, both families) stands in for the host's
 * services.
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:net";
import { after, before, describe, test } from "node:test";
import { bridgeLinkLocal, probeEgress } from "@denv/denvd";
import { pinSpec, RegistryPinner, validateCompose } from "@denv/spec";
import { deployStack, dockerBridgeAddress, openTestHost, type TestHost } from "../harness/test-host.ts";

let host: TestHost;
let listener: Server;
let port: number;
const seen: string[] = [];

const compose = (egress: "deny" | "allow", extra = "") => `x-denv:
  kind: agent
  egress: ${egress}
services:
  box:
    image: 127.0.0.1:5000/denv/opsbox:bookworm
    command: ["sleep", "infinity"]
${extra}`;

async function deploy(text: string) {
  const r = validateCompose(text, { projectName: "v6" });
  assert.ok(r.ok, JSON.stringify(!r.ok && r.errors));
  return deployStack(host.denvd, await pinSpec(r.spec, new RegistryPinner()), { name: `v6-${Date.now()}` });
}

before(async () => {
  listener = createServer((s) => {
    seen.push(s.remoteAddress ?? "");
    s.destroy();
  });
  await new Promise<void>((r) => listener.listen(0, "::", r));
  port = (listener.address() as { port: number }).port;
  host = await openTestHost({ egressProbeTarget: { host: dockerBridgeAddress(), port } });
});

after(async () => {
  await host?.close();
  listener?.close();
});

describe("IPv6 on deny networks", () => {
  test("a deny container has no IPv6, and the probe proves the host's link-local address unreachable", async () => {
    const d = await deploy(compose("deny"));
    const v6 = d.evidence.egress.ipv6;
    assert.ok(v6, "the probe covers IPv6");
    assert.equal(v6.disabled, true);
    assert.equal(v6.addresses, 0);
    assert.match(v6.target, /^\[fe80:[0-9a-f:]+%eth0\]:\d+$/);
    assert.equal(v6.result, "blocked");
    assert.equal(d.evidence.egress.result, "blocked");
    // From inside, as root in the container: nothing to send IPv6 from, and the host is not there.
    const ll = v6.target.slice(1, v6.target.indexOf("%"));
    const before = seen.length;
    const r = await host.denvd.exec(d.stack.id, "box", {
      command: [
        "bash",
        "-c",
        `cat /proc/sys/net/ipv6/conf/all/disable_ipv6; echo 0 > /proc/sys/net/ipv6/conf/all/disable_ipv6 2>/dev/null; echo write=$?; timeout 2 bash -c 'exec 3<>/dev/tcp/${ll}%eth0/${port}' 2>/dev/null; echo connect=$?`,
      ],
      user: "0",
    });
    assert.match(r.stdout.toString(), /^1\nwrite=[1-9]\d*\nconnect=[1-9]\d*\n$/);
    assert.equal(seen.length, before);
    await host.denvd.destroy(d.stack.id);
  });

  test("a container that turned IPv6 back on (what the refused sysctl did) is caught by the probe", async () => {
    // Made by hand, as the engine would have made it before: an internal network like a deny
    // environment's, and a container with net.ipv6.conf.all.disable_ipv6=0.
    const labels = { "dev.denv.test": host.runId };
    const net = await host.docker.createNetwork({
      Name: `denv-v6-${host.runId}`,
      Internal: true,
      Labels: labels,
      Options: { "com.docker.network.bridge.inhibit_ipv4": "true" },
    });
    const c = await host.docker.createContainer({
      Image: "127.0.0.1:5000/denv/opsbox:bookworm",
      Cmd: ["sleep", "infinity"],
      Labels: labels,
      HostConfig: {
        NetworkMode: `denv-v6-${host.runId}`,
        Sysctls: { "net.ipv6.conf.all.disable_ipv6": "0" },
      },
    });
    try {
      await c.start();
      const info = await c.inspect();
      const n = Object.values(info.NetworkSettings.Networks)[0];
      const ll = await bridgeLinkLocal(net.id);
      assert.ok(ll, "the internal bridge has a link-local address");
      const probe = () =>
        probeEgress(info.State.Pid, { host: dockerBridgeAddress(), port }, n?.IPAddress, ll);
      // At once: its address is still being checked for duplicates and a connect fails, yet an
      // address is a way out and the probe says so.
      const early = await probe();
      assert.equal(early.ipv6?.disabled, false);
      assert.ok((early.ipv6?.addresses ?? 0) > 0);
      assert.equal(early.ipv6?.result, "reachable");
      assert.equal(early.result, "reachable", "IPv4 blocked is not enough");
      // A moment later the connect itself gets through to the host's listener.
      let ev = early;
      for (let i = 0; i < 50 && ev.ipv6?.outcome !== "refused" && ev.ipv6?.outcome !== "connected"; i++) {
        await new Promise((r) => setTimeout(r, 100));
        ev = await probe();
      }
      assert.equal(ev.ipv6?.outcome, "connected");
      assert.ok(
        seen.some((a) => a.startsWith("fe80:")),
        JSON.stringify(seen),
      );
    } finally {
      await c.remove({ force: true });
      await net.remove();
    }
  });

  test("a compose file cannot turn IPv6 back on, nor set a sysctl off the allowlist", () => {
    const r = validateCompose(
      compose(
        "deny",
        "    sysctls:\n      net.ipv6.conf.all.disable_ipv6: 0\n      net.ipv4.conf.all.forwarding: 1\n",
      ),
      {},
    );
    assert.ok(!r.ok);
    assert.deepEqual(
      r.errors.map((e) => [e.code, e.path]),
      [
        ["sysctl_refused", 'services.box.sysctls["net.ipv6.conf.all.disable_ipv6"]'],
        ["sysctl_refused", 'services.box.sysctls["net.ipv4.conf.all.forwarding"]'],
      ],
    );
    assert.match(r.errors[0]?.message ?? "", /IPv6/);
  });
});
