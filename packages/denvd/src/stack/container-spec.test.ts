import assert from "node:assert/strict";
import { test } from "node:test";
import type { ResolvedService, ResolvedSpec } from "@denv/protocol";
import { validateCompose } from "@denv/spec";
import { AGENT_RUN_DIR } from "../exec/agent-channel.ts";
import type { ImageConfig } from "../runtime/container-runtime.ts";
import { AGENT_BIN, containerSpecFor, type ServiceIdentity, serviceIdentity } from "./container-spec.ts";
import { LABEL } from "./labels.ts";

function resolve(compose: string): ResolvedSpec {
  const r = validateCompose(compose, { env: {} });
  assert.ok(r.ok, JSON.stringify(!r.ok && r.errors));
  return r.spec;
}

const spec = resolve(`
services:
  db:
    image: postgres:16
    user: postgres
    volumes: [pg:/var/lib/postgresql/data]
    healthcheck: { test: ["CMD-SHELL", "pg_isready"], interval: 2s, retries: 5 }
    tmpfs: [/run/tmp]
  box:
    image: ubuntu:24.04
    user: "1000:1000"
    command: ["sleep", "infinity"]
    sysctls: { net.ipv4.tcp_syncookies: "1" }
  side:
    image: busybox
    network_mode: "service:box"
    command: ["true"]
volumes:
  pg: {}
x-denv:
  kind: rl-environment
  agent: { service: box }
  egress: deny
`);
const svc = (name: string) => spec.services[name] as ResolvedService;
const stack = {
  id: "stk_0123456789ab",
  network: "denv-stk_0123456789ab",
  operationId: "dep_1",
  versionId: null,
};
const image: ImageConfig = { user: null, entrypoint: ["/entry.sh"], cmd: ["postgres"], envNames: ["PATH"] };
const identity: ServiceIdentity = { user: "postgres", argv: ["/entry.sh", "postgres"], homeSet: false };

function specFor(service: string, agent: boolean, containerIds: Record<string, string> = {}) {
  return containerSpecFor({
    stack: { ...stack, egress: spec.egress },
    service,
    s: svc(service),
    networkName: (n) => (n === "default" ? stack.network : `${stack.network}-${n}`),
    containerIds,
    labels: (extra) => ({ [LABEL.owner]: "owner1", ...extra }),
    agent: agent ? { binary: "/opt/denv-agent", runDir: "/var/lib/denv/agents/x", identity } : null,
  });
}

test("with the agent, the container starts the agent as root, which becomes the service's command as its user", () => {
  const c = specFor("db", true);
  assert.deepEqual(c.entrypoint, [
    AGENT_BIN,
    "init",
    `${AGENT_RUN_DIR}/d.sock`,
    "postgres",
    "h",
    "--",
    "/entry.sh",
    "postgres",
  ]);
  assert.equal(c.cmd, null);
  assert.equal(c.user, "0");
  // The engine's healthcheck would run as root: it is off, and denvd runs the test as the user.
  assert.deepEqual(c.healthcheck?.test, ["NONE"]);
  const binds = c.mounts.filter((m) => m.kind === "bind");
  assert.deepEqual(binds, [
    { kind: "bind", source: "/opt/denv-agent", target: AGENT_BIN, readOnly: true },
    { kind: "bind", source: "/var/lib/denv/agents/x", target: AGENT_RUN_DIR, readOnly: true },
  ]);
});

test("without the agent, the service's own entrypoint, user and healthcheck go to the engine", () => {
  const c = specFor("db", false);
  assert.equal(c.entrypoint, svc("db").entrypoint);
  assert.equal(c.user, "postgres");
  assert.deepEqual(c.healthcheck?.test, ["CMD-SHELL", "pg_isready"]);
  assert.equal(c.healthcheck?.intervalMs, 2000);
  assert.equal(c.mounts.filter((m) => m.kind === "bind").length, 0);
});

test("every container is hardened, labelled with its stack, and its volumes are the stack's", () => {
  const c = specFor("db", true);
  assert.equal(c.noNewPrivileges, true);
  assert.ok(c.capDrop.length > 0);
  assert.equal(c.name, `${stack.network}-db`);
  assert.equal(c.labels[LABEL.stack], stack.id);
  assert.equal(c.labels[LABEL.service], "db");
  assert.equal(c.labels[LABEL.operation], "dep_1");
  assert.equal(c.labels[LABEL.owner], "owner1");
  assert.equal(c.labels[LABEL.version], undefined);
  const vol = c.mounts.find((m) => m.kind === "volume");
  assert.deepEqual(vol && { volume: vol.volume, target: vol.target }, {
    volume: `${stack.network}-pg`,
    target: "/var/lib/postgresql/data",
  });
  assert.ok(c.mounts.some((m) => m.kind === "tmpfs" && m.target === "/run/tmp"));
  assert.deepEqual(c.network, { kind: "network", networks: [{ name: stack.network, aliases: ["db"] }] });
});

test("on a deny stack a container has no IPv6, and keeps the sysctls it asked for", () => {
  const c = specFor("box", false);
  assert.equal(c.sysctls["net.ipv6.conf.all.disable_ipv6"], "1");
  assert.equal(c.sysctls["net.ipv6.conf.default.disable_ipv6"], "1");
  assert.equal(c.sysctls["net.ipv4.tcp_syncookies"], "1");
  const open = containerSpecFor({
    stack: { ...stack, egress: "allow" },
    service: "box",
    s: svc("box"),
    networkName: () => stack.network,
    containerIds: {},
    labels: (e) => e,
    agent: null,
  });
  assert.equal(open.sysctls["net.ipv6.conf.all.disable_ipv6"], undefined);
});

test("a service joining another's network namespace gets that container, and no network of its own", () => {
  const c = specFor("side", false, { box: "c0ffee" });
  assert.deepEqual(c.network, { kind: "container", containerId: "c0ffee" });
  assert.equal(c.sysctls["net.ipv6.conf.all.disable_ipv6"], undefined);
});

test("a fork's containers carry the version they came from", () => {
  const c = containerSpecFor({
    stack: { ...stack, versionId: "ver_0123456789ab", egress: "deny" },
    service: "box",
    s: svc("box"),
    networkName: () => stack.network,
    containerIds: {},
    labels: (e) => e,
    agent: null,
  });
  assert.equal(c.labels[LABEL.version], "ver_0123456789ab");
});

test("identity: the service's user and command win over the image's; an entrypoint drops the image's command", () => {
  assert.deepEqual(serviceIdentity("db", svc("db"), image), {
    user: "postgres",
    argv: ["/entry.sh", "postgres"],
    homeSet: false,
  });
  assert.deepEqual(serviceIdentity("box", svc("box"), { ...image, user: "root", envNames: ["HOME"] }), {
    user: "1000:1000",
    argv: ["/entry.sh", "sleep", "infinity"],
    homeSet: true,
  });
  const withEntry = { ...svc("box"), entrypoint: ["/bin/run"], command: null, user: null };
  assert.deepEqual(serviceIdentity("box", withEntry, { ...image, user: "app" }), {
    user: "app",
    argv: ["/bin/run"],
    homeSet: false,
  });
});

test("identity: a service with no command anywhere is refused with the fix", () => {
  const bare = { ...svc("box"), command: null, entrypoint: null };
  assert.throws(
    () => serviceIdentity("box", bare, { user: null, entrypoint: null, cmd: null, envNames: [] }),
    /service box has no command: its image gives none; set command: in the compose file/,
  );
});
