/**
 * An egress policy through the product's surfaces, on the real engine against the test's own
 * internet (test-internet.ts): a project deployed with one, its policy changed with
 * `denv env egress` (PATCH /v1/envs/{id}/egress) while it runs, its log read back through the API
 * with the service and the rule of each connection, another team kept out, a bad rule refused.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ALL_TRAFFIC, Sandbox } from "e2b";
import { cliRunner } from "../harness/cli-runner.ts";
import { keyWithRole, type Lab, openLab } from "../harness/lab.ts";
import { startTestInternet, type TestInternet } from "../harness/test-internet.ts";

let lab: Lab;
let net: TestInternet;
let cli: ReturnType<typeof cliRunner>;

const FETCH = `
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=60)
    print(r.status)
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
except Exception as e:
    print("error", repr(e))
`;

async function fetchIn(url: string): Promise<string> {
  const r = await lab.api("POST", "/v1/envs/egress%2Falpha/exec", {
    service: "box",
    command: ["python3", "-c", FETCH, url],
  });
  assert.equal(r.status, 200, JSON.stringify(r.data));
  return String(r.data.stdout).trim();
}

before(async () => {
  net = await startTestInternet(["pkg.mirror.test", "other.mirror.test"]);
  lab = await openLab({
    teamHost: { egressHosts: Object.fromEntries(net.names.map((n) => [n, [net.address]])) },
  });
  cli = cliRunner(() => ({ url: lab.server.url, key: lab.keyA }));
  const compose = `x-denv:
  kind: agent
  agent: { service: box }
  egress: { allow: [pkg.mirror.test] }
services:
  box:
    image: 127.0.0.1:5000/denv/opsbox:bookworm
    user: "1000:1000"
    command: ["sleep", "infinity"]
`;
  await lab.api("POST", "/v1/projects", { name: "egress", kind: "agent", source: "./egress" });
  const put = await lab.api("PUT", "/v1/projects/egress/source", { compose });
  assert.equal(put.status, 200, JSON.stringify(put.data));
  const d = await lab.api("POST", "/v1/projects/egress/deploy?wait=true", { env: "alpha" });
  assert.equal(d.data.status, "succeeded", JSON.stringify(d.data));
});

after(async () => {
  await lab?.close();
  await net?.close();
});

test("denv env egress changes the policy of a running environment; the log through the API names each connection's service and rule", async () => {
  assert.match(await fetchIn("http://pkg.mirror.test/"), /^200$/);
  assert.match(await fetchIn("http://other.mirror.test/"), /^403 denv egress: refused/);
  const shown = await cli("env", "egress", "egress/alpha");
  assert.equal(shown.code, 0, shown.stderr);
  assert.match(shown.stdout, /^policy: allow pkg\.mirror\.test\n/);
  assert.match(shown.stdout, /box +pkg\.mirror\.test:80 +allowed +pkg\.mirror\.test/);
  assert.match(
    shown.stdout,
    /box +other\.mirror\.test:80 +refused +other\.mirror\.test:80 is not in the environment's egress allow list/,
  );

  const changed = await cli(
    "env",
    "egress",
    "egress/alpha",
    "--allow",
    "Other.Mirror.Test.",
    "--deny",
    "pkg.mirror.test",
  );
  assert.equal(changed.code, 0, changed.stderr);
  assert.match(
    changed.stdout,
    /^egress of egress\/alpha: allow other\.mirror\.test; deny pkg\.mirror\.test\n/,
  );
  assert.match(await fetchIn("http://other.mirror.test/"), /^200$/);
  assert.match(await fetchIn("http://pkg.mirror.test/"), /^403 .*denied by the rule pkg\.mirror\.test/);

  const log = await lab.api("GET", "/v1/envs/egress%2Falpha/egress");
  assert.equal(log.status, 200);
  assert.deepEqual(log.data.policy, { allow: ["other.mirror.test"], deny: ["pkg.mirror.test"] });
  assert.deepEqual(
    log.data.records.map(
      (r: { service: string; destination: string; allowed: boolean; rule: string | null }) => [
        r.service,
        r.destination,
        r.allowed,
        r.rule,
      ],
    ),
    [
      ["box", "pkg.mirror.test:80", true, "pkg.mirror.test"],
      ["box", "other.mirror.test:80", false, null],
      ["box", "other.mirror.test:80", true, "other.mirror.test"],
      ["box", "pkg.mirror.test:80", false, "pkg.mirror.test"],
    ],
  );
});

test("a bad rule is refused naming it, a read-only key may read but not change, another team reaches nothing", async () => {
  const bad = await cli("env", "egress", "egress/alpha", "--allow", "*");
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr, /allow\[0\]: "\*": "\*" alone is every name: use egress: allow/);
  const reader = await keyWithRole(lab, "read-only", "denv");
  assert.equal((await lab.api("GET", "/v1/envs/egress%2Falpha/egress", undefined, reader)).status, 200);
  const refused = await lab.api("PATCH", "/v1/envs/egress%2Falpha/egress", { allow: [], deny: [] }, reader);
  assert.equal(refused.status, 403, JSON.stringify(refused.data));
  const other = await lab.api("GET", "/v1/envs/egress%2Falpha/egress", undefined, lab.keyB);
  assert.equal(other.status, 404);
  const stolen = await lab.api(
    "PATCH",
    "/v1/envs/egress%2Falpha/egress",
    { allow: ["x.test"], deny: [] },
    lab.keyB,
  );
  assert.equal(stolen.status, 404);
});

test("through MCP (the real SDK): set_egress replaces the policy, egress_log reads it back with the last connections", async () => {
  const client = new Client({ name: "denv-test", version: "1" });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${lab.server.url}/v1/mcp`), {
      requestInit: { headers: { authorization: `Bearer ${lab.keyA}` } },
    }),
  );
  try {
    const set = (await client.callTool({
      name: "set_egress",
      arguments: { environment: "egress/alpha", allow: ["pkg.mirror.test"] },
    })) as { isError?: boolean; structuredContent?: { policy: unknown; closed: number } };
    assert.ok(!set.isError, JSON.stringify(set));
    assert.deepEqual(set.structuredContent?.policy, { allow: ["pkg.mirror.test"], deny: [] });
    assert.match(await fetchIn("http://pkg.mirror.test/"), /^200$/);
    const log = (await client.callTool({
      name: "egress_log",
      arguments: { environment: "egress/alpha" },
    })) as {
      structuredContent?: { policy: unknown; records: { destination: string; allowed: boolean }[] };
    };
    assert.deepEqual(log.structuredContent?.policy, { allow: ["pkg.mirror.test"], deny: [] });
    assert.deepEqual(log.structuredContent?.records.at(-1), {
      ...log.structuredContent?.records.at(-1),
      destination: "pkg.mirror.test:80",
      allowed: true,
    });
    const bad = (await client.callTool({
      name: "set_egress",
      arguments: { environment: "egress/alpha", allow: ["*"] },
    })) as { isError?: boolean; content: { text?: string }[] };
    assert.equal(bad.isError, true);
    assert.match(JSON.stringify(bad.content), /alone is every name/);
  } finally {
    await client.close();
  }
});

test("through E2B's SDK: a sandbox of the version takes its policy, and updateNetwork replaces it; one without a policy is refused, saying why", async () => {
  const env = await lab.api("GET", "/v1/envs/egress%2Falpha");
  const opts = { apiKey: lab.keyA, apiUrl: `${lab.server.url}/e2b`, sandboxUrl: `${lab.server.url}/e2b` };
  const sbx = await Sandbox.create(env.data.current_version_id as string, opts);
  try {
    await sbx.files.write("/tmp/fetch.py", FETCH);
    const fetch = async (url: string) =>
      (await sbx.commands.run(`python3 /tmp/fetch.py ${url}`)).stdout.trim();
    assert.match(await fetch("http://pkg.mirror.test/"), /^200$/);
    assert.match(await fetch("http://other.mirror.test/"), /^403 /);
    await sbx.updateNetwork({ allowOut: ["other.mirror.test"], denyOut: [ALL_TRAFFIC] });
    assert.match(await fetch("http://other.mirror.test/"), /^200$/);
    assert.match(await fetch("http://pkg.mirror.test/"), /^403 /);
    await assert.rejects(sbx.updateNetwork({ allowOut: [ALL_TRAFFIC] }), /whole internet/);
  } finally {
    await sbx.kill();
  }
  // Network rules on create would be a guess (open or closed): refused, saying what to do instead.
  await assert.rejects(
    Sandbox.create("127.0.0.1:5000/denv/opsbox:bookworm", {
      ...opts,
      network: { allowOut: ["pkg.mirror.test"], denyOut: [ALL_TRAFFIC] },
    }),
    /network rules on create are not served by denv/,
  );
  const plain = await Sandbox.create("127.0.0.1:5000/denv/opsbox:bookworm", opts);
  try {
    await assert.rejects(
      plain.updateNetwork({ allowOut: ["pkg.mirror.test"], denyOut: [ALL_TRAFFIC] }),
      /deployed with egress (deny|allow): only an environment deployed with an egress policy/,
    );
  } finally {
    await plain.kill();
  }
});
