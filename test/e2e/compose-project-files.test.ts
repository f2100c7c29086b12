/**
 * Compose files as people write them, on the real engine: an anonymous volume (a path alone,
 * `/srv/app/node_modules`) becomes a dataset of its own, filled from the image's content there as
 * the engine fills a new volume, kept in the version and forked: each fork starts with the files
 * the version holds and keeps its own writes. A file secret in the project (`secrets: {file:}`)
 * travels sealed with the compose file, is a read-only file at /run/secrets/NAME in the services
 * that name it (a database takes its password from it), is in every fork, and is never shown by
 * the API; a secret file that is a link out of the project is refused before anything is sent.
 */
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
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

const PW = "pw-of-the-project-7f3a";

test("a file secret in the project: the database reads its password from it, every fork has it, the API never shows it", async () => {
  const dir = join(work, "secret-stack");
  write(dir, {
    "docker-compose.yaml": `x-denv:
  kind: service
services:
  db:
    image: 127.0.0.1:5000/denv/postgres:15-bookworm
    environment:
      POSTGRES_PASSWORD_FILE: /run/secrets/db-password
    secrets: [db-password]
    volumes: ["pgdata:/var/lib/postgresql/data"]
    healthcheck:
      test: ["CMD-SHELL", "pg_isready -U postgres"]
      interval: 1s
      retries: 60
  app:
    image: 127.0.0.1:5000/denv/opsbox:bookworm
    user: "1000:1000"
    command: ["sleep", "infinity"]
    environment: { PGHOST: db, PGUSER: postgres }
    secrets:
      - source: db-password
        target: db.pw
        mode: 0440
        gid: "1000"
    depends_on: { db: { condition: service_healthy } }
secrets:
  db-password:
    file: ./db/password.txt
volumes:
  pgdata: {}
`,
    "db/password.txt": PW,
  });
  assert.equal(
    (await denv("project", "create", "--kind", "service", "--source", dir, "secret-stack")).code,
    0,
  );
  const d = JSON.parse((await denv("deploy", "--project", "secret-stack", "--wait", "--json")).stdout);
  assert.equal(d.status, "succeeded", d.reason);
  assert.doesNotMatch(
    JSON.stringify(d),
    new RegExp(PW),
    "the deployment's phases and evidence never hold it",
  );
  const app = async (env: string, script: string) => {
    const r = await lab.api("POST", `/v1/envs/${encodeURIComponent(env)}/exec`, {
      service: "app",
      command: ["bash", "-c", script],
    });
    assert.equal(r.status, 200, JSON.stringify(r.data));
    return { code: r.data.exit_code as number, out: `${r.data.stdout}${r.data.stderr}`.trim() };
  };
  // Where Compose puts it, moded and owned as the file says, read-only.
  assert.equal((await app("secret-stack/alpha", "stat -c '%a %u %g' /run/secrets/db.pw")).out, "440 0 1000");
  assert.notEqual((await app("secret-stack/alpha", "echo x > /run/secrets/db.pw")).code, 0);
  const login = "PGPASSWORD=$(cat /run/secrets/db.pw) psql -Atc 'select 40 + 2'";
  assert.equal((await app("secret-stack/alpha", login)).out, "42");
  // The database took its password from the file: another one is refused.
  assert.notEqual((await app("secret-stack/alpha", "PGPASSWORD=wrong psql -Atc 'select 1'")).code, 0);
  const f = await lab.api("POST", `/v1/versions/${d.version_id}/forks`, { count: 1, name: "secret-fork" });
  assert.equal(f.status, 200, JSON.stringify(f.data));
  const fork = f.data.forks[0].environment.id as string;
  assert.equal((await app(fork, login)).out, "42");
  const spec = await lab.api("GET", `/v1/versions/${d.version_id}/spec`);
  assert.equal(spec.status, 200);
  assert.doesNotMatch(JSON.stringify(spec.data), new RegExp(PW));
  assert.equal(spec.data.spec.secret_files["db-password"].content_b64, "(redacted)");
  const v = await denv("validate", dir, "--json");
  assert.doesNotMatch(v.stdout, new RegExp(PW));

  // Hostile: the secret's file made a link to a file of this machine; the upload refuses it,
  // naming it, and the project keeps what it had.
  rmSync(join(dir, "db/password.txt"));
  writeFileSync(join(work, "outside.txt"), "the machine's own secret");
  symlinkSync(join(work, "outside.txt"), join(dir, "db/password.txt"));
  const refused = await denv("deploy", "--project", "secret-stack", "--wait");
  assert.equal(refused.code, 1, refused.stderr);
  assert.match(refused.stderr, /db\/password\.txt is a symbolic link/);
  assert.equal((await app("secret-stack/alpha", login)).out, "42");
});
