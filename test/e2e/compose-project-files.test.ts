/**
 * Compose files as people write them, on the real engine: an anonymous volume (a path alone,
 * `/srv/app/node_modules`) becomes a dataset of its own, filled from the image's content there as
 * the engine fills a new volume, kept in the version and forked: each fork starts with the files
 * the version holds and keeps its own writes.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { type Lab, openLab } from "../security/security-lab.ts";
import { cliRunner } from "./cli-runner.ts";
import { removeBuiltImages } from "./engine-helpers.ts";

let lab: Lab;
const work = mkdtempSync(join(tmpdir(), "denv-compose-files-"));

before(async () => {
  lab = await openLab();
});

after(async () => {
  await lab?.close();
  await removeBuiltImages(["anon-stack"]);
  rmSync(work, { recursive: true, force: true });
});

const denv = cliRunner(() => ({ url: lab.server.url, key: lab.keyA }));

function write(dir: string, files: Record<string, string>) {
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(join(dir, rel, ".."), { recursive: true });
    writeFileSync(join(dir, rel), text);
  }
}

async function sh(env: string, script: string) {
  const r = await lab.api("POST", `/v1/envs/${encodeURIComponent(env)}/exec`, {
    service: "app",
    command: ["sh", "-c", script],
  });
  assert.equal(r.status, 200, JSON.stringify(r.data));
  return (r.data.stdout as string).trim();
}

test("an anonymous volume is a dataset of its own: filled from the image, in the version, forked with it", async () => {
  const dir = join(work, "anon-stack");
  write(dir, {
    "docker-compose.yaml": `x-denv:
  kind: service
services:
  app:
    build: ./app
    volumes:
      - /srv/app/node_modules
`,
    "app/Dockerfile": `FROM debian:bookworm
RUN mkdir -p /srv/app/node_modules && echo from-image > /srv/app/node_modules/pkg.txt
CMD ["sleep", "infinity"]
`,
    "app/nonce.txt": `${Date.now()}-${Math.random()}\n`,
  });
  const v = await denv("validate", dir, "--json");
  assert.equal(v.code, 0, v.stdout);
  const validated = JSON.parse(v.stdout);
  assert.ok(
    validated.warnings.some(
      (w: { code: string; message: string }) =>
        w.code === "volume_anonymous" && /became dataset anon-app-srv-app-node_modules/.test(w.message),
    ),
    v.stdout,
  );
  assert.equal((await denv("project", "create", "--kind", "service", "--source", dir, "anon-stack")).code, 0);
  const d = JSON.parse((await denv("deploy", "--project", "anon-stack", "--wait", "--json")).stdout);
  assert.equal(d.status, "succeeded", d.reason);
  assert.equal(await sh("anon-stack/alpha", "cat /srv/app/node_modules/pkg.txt"), "from-image");
  // Written before the snapshot: part of the version every fork starts from.
  await sh("anon-stack/alpha", "echo installed > /srv/app/node_modules/added.txt");
  const snap = JSON.parse((await denv("snapshot", "anon-stack/alpha", "--json")).stdout);
  assert.equal(snap.status, "succeeded", snap.reason);
  const version = snap.version_id as string;
  const forks = [];
  for (const name of ["anon-1", "anon-2"]) {
    const f = await lab.api("POST", `/v1/versions/${version}/forks`, { count: 1, name });
    assert.equal(f.status, 200, JSON.stringify(f.data));
    forks.push(f.data.forks[0].environment.id as string);
  }
  const [one, two] = forks as [string, string];
  assert.equal(
    await sh(one, "cat /srv/app/node_modules/pkg.txt /srv/app/node_modules/added.txt"),
    "from-image\ninstalled",
  );
  await sh(one, "echo mine > /srv/app/node_modules/only-one.txt");
  assert.equal(await sh(two, "ls /srv/app/node_modules | sort | tr '\\n' ' '"), "added.txt pkg.txt");
  assert.equal(
    await sh("anon-stack/alpha", "test -e /srv/app/node_modules/only-one.txt && echo leaked || echo own"),
    "own",
  );
});
