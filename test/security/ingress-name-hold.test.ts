/**
 * Round 4's finding 5: a readable ingress name (`{service}.{env}.{project}.DOMAIN`) counted as free
 * while its holder's host was briefly away (`lost`): another team deployed a project of the same
 * name, the name served it, and when the host came back the name was not given back. Here, for
 * real: team A's environment holds `web.alpha.shop`; its host goes away until the server marks it
 * lost; team B, on a host of its own, deploys `shop/alpha` with the same service; then A's host
 * comes back. The name must never serve B, must be A's again, and B's refusal must not say whose
 * environment holds it.
 */
import assert from "node:assert/strict";
import { request } from "node:http";
import { after, before, test } from "node:test";
import { joinServer, Sidecar } from "@denv/denvd";
import { type Lab, openLab } from "../harness/lab.ts";
import { openTestHost, type TestHost } from "../harness/test-host.ts";
import { waitFor } from "../harness/wait-for.ts";

const IMAGE = "127.0.0.1:5000/denv/opsbox:bookworm";
/** A public web service on 8000 that says which team's it is. */
const compose = (team: string) => `x-denv:
  kind: service
  ingress: { public: [web] }
services:
  web:
    image: ${IMAGE}
    command: ["sh", "-c", "mkdir -p /tmp/w && echo ${team} > /tmp/w/who && cd /tmp/w && exec python3 -m http.server 8000"]
    ports: ["8000"]
`;

let lab: Lab;
let hostB: TestHost;
let sidecarB: Sidecar;
let keyB: string;

/** GET a path on an ingress name, through the ports listener: the status and body. */
function byName(host: string, path: string): Promise<{ status: number; body: string }> {
  const at = new URL(lab.server.portsUrl);
  return new Promise((resolve, reject) => {
    const req = request({ host: at.hostname, port: at.port, path, headers: { host } }, (res) => {
      let body = "";
      res.on("data", (c: Buffer) => {
        body += c.toString();
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

async function envStatus(name: string, key: string): Promise<string> {
  return (await lab.api("GET", `/v1/envs/${encodeURIComponent(name)}`, undefined, key)).data.status;
}

before(async () => {
  lab = await openLab({ hostWatch: { lostAfterMs: 1500, everyMs: 200 } });
  keyB = lab.keyB;
  hostB = await openTestHost({});
  const token = (await lab.api("POST", "/v1/hosts/join-token", undefined, keyB)).data.token as string;
  const joined = await joinServer(lab.server.url, token, "host-b");
  sidecarB = new Sidecar({ serverUrl: lab.server.url, secret: joined.secret, denvd: hostB.denvd });
  sidecarB.start();
  await sidecarB.ready;
});

after(async () => {
  await sidecarB?.stop().catch(() => {});
  await hostB?.close();
  await lab?.close();
});

test("a name held by an environment whose host is away is not taken by another team, and serves its holder again", async () => {
  assert.ok(lab.server.ingressDomain, "the server has ingress names");
  const name = `web.alpha.shop.${lab.server.ingressDomain.split(":")[0]}`;
  const deploy = async (team: string, key: string) => {
    await lab.api("POST", "/v1/projects", { name: "shop", kind: "service", source: "./shop" }, key);
    await lab.api("PUT", "/v1/projects/shop/source", { compose: compose(team) }, key);
    const d = await lab.api("POST", "/v1/projects/shop/deploy?wait=true", { env: "alpha" }, key);
    assert.equal(d.data.status, "succeeded", JSON.stringify(d.data.reason));
    return d.data;
  };
  // The name answers once the service listens: waited on for as long as the environment runs.
  const answers = async (key: string) => {
    for (;;) {
      const r = await byName(name, "/who");
      if (r.status === 200) return r;
      assert.equal(await envStatus("shop/alpha", key), "running", `the name answered ${r.status}`);
      await new Promise((res) => setTimeout(res, 100));
    }
  };
  await deploy("team-a", lab.keyA);
  assert.equal((await answers(lab.keyA)).body, "team-a\n");

  // Team A's host goes away until the server marks its environment lost.
  await lab.stopSidecar();
  await waitFor(
    "team A's environment to be marked lost",
    async () => (await envStatus("shop/alpha", lab.keyA)) === "lost",
  );
  assert.equal((await byName(name, "/who")).status, 404, "a lost environment's name serves nothing");

  // Team B deploys the same project and service name meanwhile: it runs, but the name is not its.
  const b = await deploy("team-b", keyB);
  const ingress = (b.phases as { name: string; evidence: any }[]).find((p) => p.name === "ingress")?.evidence;
  const refused = (ingress?.refused ?? []) as { host: string | null; reason: string }[];
  const mine = refused.find((r) => r.host === name);
  assert.ok(mine, `team B was not refused the name: ${JSON.stringify(ingress)}`);
  assert.equal(mine.reason, "another team's environment holds this name");
  assert.equal((await byName(name, "/who")).status, 404, "the name never serves team B");

  // Team A's host comes back: the name is still A's, and serves it.
  await lab.restartSidecar();
  await waitFor(
    "team A's environment to come back",
    async () => (await envStatus("shop/alpha", lab.keyA)) === "running",
  );
  assert.equal((await answers(lab.keyA)).body, "team-a\n");
  const holders = await lab.server.store
    .selectFrom("ingress_names")
    .select(["team_id"])
    .where("host", "=", name)
    .execute();
  assert.equal(holders.length, 1);

  // Destroyed, it is free: team B's next deploy takes it.
  assert.equal((await lab.api("DELETE", "/v1/envs/shop%2Falpha?wait=true")).status, 200);
  await deploy("team-b", keyB);
  assert.equal((await answers(keyB)).body, "team-b\n");
  await lab.api("DELETE", "/v1/envs/shop%2Falpha?wait=true", undefined, keyB);
});
