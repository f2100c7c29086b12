/**
 * A pause that keeps memory stops each container from its checkpoint and starts it again; the
 * engine gives a started container the lowest free address, so containers resumed in another
 * order than they first started would swap addresses, and each restored process adds its old one
 * back: two containers would answer for one address, and a service's name would lead to another
 * service. A CI run met it as a refused connect to Redis after an E2B resume. Here b starts before
 * a (b takes the first address), and a resumes first: each must come back with its own address,
 * and b must find a's own Redis (its run id) under a's name, not its own.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { after, before, test } from "node:test";
import { DockerCheckpoints } from "@denv/denvd";
import Docker from "dockerode";
import { execIn, removeLabelled } from "../harness/engine.ts";
import { waitFor } from "../harness/wait-for.ts";

const docker = new Docker();
const labels = { "denv.test": `pause-addresses-${randomBytes(4).toString("hex")}` };
const IMAGE = "127.0.0.1:5000/denv/redis:7-bookworm";
let network: Docker.Network;
const containers: Record<string, Docker.Container> = {};

const addressOf = async (c: Docker.Container) =>
  Object.values((await c.inspect()).NetworkSettings.Networks)[0]?.IPAddress ?? "";
const runIdOf = (text: string) => /^run_id:(\w+)/m.exec(text)?.[1] ?? null;
/** `redis-cli -h NAME info server` from inside `from`: the run id of whichever Redis answers. */
const runIdAt = async (from: Docker.Container, name: string) =>
  runIdOf((await execIn(from, ["redis-cli", "-h", name, "info", "server"])).stdout);

before(async () => {
  // A /24 outside denvd's own pool (172.16.0.0/12), so stacks of tests beside this one never meet it.
  for (let tries = 0; !network; tries++) {
    const subnet = `10.${200 + ((randomBytes(1)[0] as number) % 50)}.${randomBytes(1)[0]}.0/24`;
    try {
      network = await docker.createNetwork({
        Name: labels["denv.test"],
        Internal: true,
        Labels: labels,
        IPAM: { Driver: "default", Config: [{ Subnet: subnet }] },
      });
    } catch (err) {
      if (tries > 20) throw err;
    }
  }
  for (const name of ["a", "b"])
    containers[name] = await docker.createContainer({
      Image: IMAGE,
      Cmd: ["redis-server", "--save", "", "--appendonly", "no"],
      Labels: labels,
      HostConfig: { NetworkMode: labels["denv.test"] },
      NetworkingConfig: { EndpointsConfig: { [labels["denv.test"]]: { Aliases: [name] } } },
    });
});

after(() => removeLabelled(docker, labels));

test("containers resumed in another order than they started keep their own addresses, and each name leads to its own service", async () => {
  const a = containers.a as Docker.Container;
  const b = containers.b as Docker.Container;
  await b.start();
  await a.start();
  const before = { a: await addressOf(a), b: await addressOf(b) };
  const runId = await waitFor("a's Redis to answer b", () => runIdAt(b, "a"));
  assert.notEqual(await waitFor("b's own Redis to answer", () => runIdAt(b, "127.0.0.1")), runId);
  const cp = new DockerCheckpoints(docker);
  assert.equal(await cp.unavailable(), null);
  await cp.suspend(b.id);
  await cp.suspend(a.id);
  assert.equal((await a.inspect()).State.Running, false);
  await cp.unsuspend(a.id);
  await cp.unsuspend(b.id);
  assert.deepEqual({ a: await addressOf(a), b: await addressOf(b) }, before);
  const again = await waitFor("a's restored Redis to answer b", () => runIdAt(b, "a"));
  assert.equal(again, runId, "a's name leads to a's own Redis, the same process");
  // And the other way: a reaches b's Redis, not its own.
  assert.notEqual(await waitFor("b's Redis to answer a", () => runIdAt(a, "b")), runId);
});
