/**
 * Compose files as people write them, on the real engine: an anonymous volume (a path alone,
 * `/srv/app/node_modules`) becomes a dataset of its own, filled from the image's content there as
 * the engine fills a new volume, kept in the version and forked: each fork starts with the files
 * the version holds and keeps its own writes. A file secret in the project (`secrets: {file:}`)
 * travels sealed with the compose file, is a read-only file at /run/secrets/NAME in the services
 * that name it (a database takes its password from it), is in every fork, and is never shown by
 * the API; a secret file that is a link out of the project is refused before anything is sent.
 * Relative bind mounts of the project's own files (a read-only config file, a writable source
 * folder) become datasets seeded with them: every fork starts with the same files and keeps its
 * own writes; a source that is a link, holds a link out of it, or is over the upload limit is
 * refused before anything is sent, and the environment keeps serving what it had. A git source's
 * mounts, secret files and env_file come from its commit.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  chmodSync,
  chownSync,
  mkdirSync,
  mkdtempSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import tar from "tar-stream";
import { type GitHttpServer, startGitHttpServer } from "../doubles/git-http-server.ts";
import { cliRunner } from "../harness/cli-runner.ts";
import { removeBuiltImages } from "../harness/engine.ts";
import { type Lab, openLab } from "../harness/lab.ts";
import { LOCAL_REGISTRY } from "../harness/test-host.ts";
import { waitFor } from "../harness/wait-for.ts";

let lab: Lab;
const work = mkdtempSync(join(tmpdir(), "denv-compose-files-"));
let gitServer: GitHttpServer;
const gitRoot = mkdtempSync(join(tmpdir(), "denv-compose-files-git-"));

before(async () => {
  gitServer = await startGitHttpServer(gitRoot);
  lab = await openLab({ fetchAllow: [...LOCAL_REGISTRY, gitServer.host] });
});

after(async () => {
  await lab?.close();
  await gitServer?.close();
  rmSync(gitRoot, { recursive: true, force: true });
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

test("project files mounted as Compose mounts them: a read-only config file, a writable source folder with an anonymous node_modules, a database on a file secret; forked", async () => {
  const dir = join(work, "files-stack");
  const weird = "notes\nwith a newline.txt";
  write(dir, {
    "docker-compose.yaml": `x-denv:
  kind: service
services:
  db:
    image: 127.0.0.1:5000/denv/postgres:15-bookworm
    environment:
      POSTGRES_PASSWORD_FILE: /run/secrets/db-password
    secrets: [db-password]
    healthcheck:
      test: ["CMD-SHELL", "pg_isready -U postgres"]
      interval: 1s
      retries: 60
  app:
    image: 127.0.0.1:5000/denv/opsbox:bookworm
    command: ["sleep", "infinity"]
    working_dir: /code
    environment: { PGHOST: db, PGUSER: postgres }
    secrets: [db-password]
    volumes:
      - ./conf/app.conf:/etc/app/app.conf:ro
      - ./src:/code
      - /code/node_modules
    depends_on: { db: { condition: service_healthy } }
secrets:
  db-password:
    file: ./db/password.txt
`,
    "db/password.txt": PW,
    "conf/app.conf": "listen = 8080\n",
    "src/main.js": "console.log('v1')\n",
    "src/lib/util.js": "module.exports = 1\n",
    [`src/${weird}`]: "kept\n",
  });
  symlinkSync("lib/util.js", join(dir, "src/util-link.js"));
  // A developer's folder (uid 1000, 0750): the mount shows it as theirs, as Compose's bind would.
  chownSync(join(dir, "src"), 1000, 1000);
  chmodSync(join(dir, "src"), 0o750);
  const v = await denv("validate", dir, "--json");
  assert.equal(v.code, 0, v.stdout);
  const validated = JSON.parse(v.stdout);
  assert.deepEqual(
    Object.fromEntries(
      Object.entries(validated.spec.datasets as Record<string, { seed?: { source: string } }>)
        .filter(([, d]) => d.seed)
        .map(([n, d]) => [n, d.seed?.source]),
    ),
    { "project-conf-app-conf": "conf/app.conf", "project-src": "src" },
  );
  assert.equal(
    (await denv("project", "create", "--kind", "service", "--source", dir, "files-stack")).code,
    0,
  );
  const d = JSON.parse((await denv("deploy", "--project", "files-stack", "--wait", "--json")).stdout);
  assert.equal(d.status, "succeeded", d.reason);
  const phase = (n: string) => d.phases.find((p: { name: string }) => p.name === n).evidence;
  const mounts = phase("resolve").project_mounts as { source: string; type: string; digest: string }[];
  assert.deepEqual(
    mounts.map((m) => [m.source, m.type]),
    [
      ["conf/app.conf", "file"],
      ["src", "directory"],
    ],
  );
  for (const m of mounts) assert.match(m.digest, /^sha256:[0-9a-f]{64}$/);
  assert.equal(phase("prepare").seeded["project-src"].entries, 5);
  const app = async (env: string, script: string) => {
    const r = await lab.api("POST", `/v1/envs/${encodeURIComponent(env)}/exec`, {
      service: "app",
      command: ["bash", "-c", script],
    });
    assert.equal(r.status, 200, JSON.stringify(r.data));
    return { code: r.data.exit_code as number, out: `${r.data.stdout}${r.data.stderr}`.trim() };
  };
  const alpha = "files-stack/alpha";
  assert.equal((await app(alpha, "cat /etc/app/app.conf")).out, "listen = 8080");
  assert.equal(
    (await app(alpha, "stat -c '%u %g %a' /code")).out,
    "1000 1000 750",
    "the folder's owner and mode",
  );
  assert.notEqual((await app(alpha, "echo 'listen = 1' > /etc/app/app.conf")).code, 0, "mounted :ro");
  assert.equal(
    (await app(alpha, "cat main.js lib/util.js util-link.js")).out,
    "console.log('v1')\nmodule.exports = 1\nmodule.exports = 1",
  );
  assert.equal((await app(alpha, "readlink util-link.js")).out, "lib/util.js", "a link inside stays a link");
  assert.equal((await app(alpha, `cat "$(printf 'notes\\nwith a newline.txt')"`)).out, "kept");
  // node_modules is its own dataset over the source folder, as the engine layers them.
  assert.equal((await app(alpha, "echo pkg > node_modules/pkg.txt && ls node_modules")).out, "pkg.txt");
  const login = "PGPASSWORD=$(cat /run/secrets/db-password) psql -Atc 'select 40 + 2'";
  assert.equal((await app(alpha, login)).out, "42");

  const forks: string[] = [];
  for (const name of ["files-1", "files-2"]) {
    const f = await lab.api("POST", `/v1/versions/${d.version_id}/forks`, { count: 1, name });
    assert.equal(f.status, 200, JSON.stringify(f.data));
    forks.push(f.data.forks[0].environment.id as string);
  }
  const [one, two] = forks as [string, string];
  for (const fork of forks) {
    assert.equal((await app(fork, "cat /etc/app/app.conf main.js")).out, "listen = 8080\nconsole.log('v1')");
    assert.equal((await app(fork, login)).out, "42");
  }
  await app(one, "echo \"console.log('mine')\" >> main.js && echo one > lib/new.js");
  assert.equal((await app(one, "tail -n1 main.js && cat lib/new.js")).out, "console.log('mine')\none");
  assert.equal(
    (await app(two, "cat main.js; test -e lib/new.js && echo leaked || echo own")).out,
    "console.log('v1')\nown",
  );
  assert.equal((await app(alpha, "test -e lib/new.js && echo leaked || echo own")).out, "own");

  // Hostile sources are refused by the CLI before anything is sent; alpha keeps serving v1.
  const refusedWith = async (re: RegExp) => {
    const r = await denv("deploy", "--project", "files-stack", "--wait");
    assert.equal(r.code, 1, r.stdout);
    assert.match(r.stderr, re);
    assert.equal((await app(alpha, "cat main.js")).out, "console.log('v1')");
  };
  writeFileSync(join(work, "host-secret.conf"), "the machine's own file");
  rmSync(join(dir, "conf/app.conf"));
  symlinkSync(join(work, "host-secret.conf"), join(dir, "conf/app.conf"));
  await refusedWith(/conf\/app\.conf is a symbolic link/);
  rmSync(join(dir, "conf/app.conf"));
  writeFileSync(join(dir, "conf/app.conf"), "listen = 8080\n");
  symlinkSync("../../../../etc", join(dir, "src/etc"));
  await refusedWith(/the link "etc" → "..\/..\/..\/..\/etc" points outside it/);
  rmSync(join(dir, "src/etc"));
  // 2 GiB (sparse: nothing is written) is over what one upload may carry.
  writeFileSync(join(dir, "src/big.bin"), "");
  truncateSync(join(dir, "src/big.bin"), 2 * 1024 ** 3);
  await refusedWith(/bind mount source \.\/src holds more than 2\.0 GiB/);
  rmSync(join(dir, "src/big.bin"));

  // A changed file is a new version with the new content; the old version is untouched.
  writeFileSync(join(dir, "src/main.js"), "console.log('v2')\n");
  const d2 = JSON.parse((await denv("deploy", "--project", "files-stack", "--wait", "--json")).stdout);
  assert.equal(d2.status, "succeeded", d2.reason);
  assert.notEqual(d2.version_id, d.version_id);
  assert.equal((await app(alpha, "cat main.js")).out, "console.log('v2')");
  assert.equal((await app(two, "cat main.js")).out, "console.log('v1')");
});

test("the API refuses bind mount sources that are not normalised project paths or were never uploaded, and project files outside the project or over the limits", async () => {
  const create = await lab.api("POST", "/v1/projects", {
    name: "bind-api",
    kind: "service",
    source: "/nowhere",
  });
  assert.equal(create.status, 201, JSON.stringify(create.data));
  const compose = "services:\n  a:\n    image: alpine\n    volumes: ['./x:/x']\n";
  const digest = `sha256:${"0".repeat(64)}`;
  for (const [path, want] of [
    ["../etc", /not a normalised path inside the project/],
    ["./x", /not a normalised path inside the project/],
    ["x\ny", /not a normalised path inside the project/],
    ["x", /was not uploaded/],
  ] as const) {
    const r = await lab.api("PUT", "/v1/projects/bind-api/source", {
      compose,
      bind_sources: { [path]: { digest, type: "directory" } },
    });
    assert.equal(r.status, 400, JSON.stringify(r.data));
    assert.match(r.data.error.message, want);
  }
  // The files a compose file reads (secrets, env_file): a path leaving the project, one with a
  // newline, a file over 1 MiB, more than 64 files: each refused, and what was stored stays.
  const before = (await lab.api("GET", "/v1/projects/bind-api")).data;
  const many = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`f${i}.txt`, "x"]));
  for (const files of [
    { "../outside.txt": "x" },
    { "/etc/passwd": "x" },
    { "a\nb.txt": "x" },
    { "big.txt": "x".repeat(1024 * 1024 + 1) },
    many,
  ]) {
    const r = await lab.api("PUT", "/v1/projects/bind-api/source", { compose, files });
    assert.equal(r.status, 400, JSON.stringify(r.data).slice(0, 300));
    assert.equal(r.data.error.code, "invalid_argument");
  }
  assert.deepEqual((await lab.api("GET", "/v1/projects/bind-api")).data, before);
});

async function deployed(project: string) {
  const started = await lab.api("POST", `/v1/projects/${project}/deploy`, { env: "alpha" });
  assert.equal(started.status, 202, JSON.stringify(started.data));
  return waitFor(`deployment ${started.data.id}'s verdict`, async () => {
    const d = (await lab.api("GET", `/v1/deployments/${started.data.id}`)).data;
    return d.status === "running" || d.status === "queued" ? undefined : d;
  });
}

const phaseOf = (d: { phases: { name: string }[] }, name: string) =>
  d.phases.find((p) => p.name === name) as unknown as {
    status: string;
    reason: string | null;
    evidence: any;
  };

function gitRepo(name: string, files: Record<string, string>, links: Record<string, string> = {}) {
  const repo = join(gitRoot, `${name}.git`);
  write(repo, files);
  for (const [at, to] of Object.entries(links)) symlinkSync(to, join(repo, at));
  const git = (...args: string[]) => execFileSync("git", ["-C", repo, ...args], { encoding: "utf8" });
  execFileSync("git", ["init", "-q", "-b", "main", repo]);
  git("add", ".");
  git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init");
  return `${gitServer.url}/${name}.git`;
}

const MOUNTING = `x-denv:
  kind: service
services:
  app:
    image: 127.0.0.1:5000/denv/opsbox:bookworm
    command: ["sleep", "infinity"]
    volumes:
      - ./conf/app.conf:/etc/app.conf:ro
      - ./src:/code
`;

test("a git source's bind mounts are the commit's files; a link out of the folder fails prepare and nothing lands", async () => {
  const source = gitRepo("mounts", {
    "compose.yaml": `${MOUNTING}    secrets: [token]
    env_file: [app.env]
secrets:
  token:
    file: ./secrets/token.txt
`,
    "conf/app.conf": "from = git\n",
    "src/main.sh": "echo from-git\n",
    "secrets/token.txt": "git-secret-41\n",
    "app.env": "FROM_ENV_FILE=yes\n",
  });
  await lab.api("POST", "/v1/projects", { name: "git-mounts", kind: "service", source });
  const d = await deployed("git-mounts");
  assert.equal(d.status, "succeeded", d.reason);
  assert.deepEqual(
    phaseOf(d, "resolve").evidence.project_mounts.map((m: { source: string; type: string }) => [
      m.source,
      m.type,
    ]),
    [
      ["conf/app.conf", "file"],
      ["src", "directory"],
    ],
  );
  assert.equal(
    await shIn("git-mounts/alpha", "cat /etc/app.conf /code/main.sh"),
    "from = git\necho from-git",
  );
  // The commit's secret file and env_file, read from the commit at resolve.
  assert.equal(
    await shIn("git-mounts/alpha", "cat /run/secrets/token; echo $FROM_ENV_FILE"),
    "git-secret-41\nyes",
  );
  assert.doesNotMatch(JSON.stringify(d), /git-secret-41/);

  // A hostile commit: the mounted folder holds a link to the host's /etc. The archive keeps it a
  // link; the host's check refuses it before anything is extracted.
  const hostile = gitRepo(
    "mounts-hostile",
    { "compose.yaml": MOUNTING, "conf/app.conf": "x\n", "src/a.sh": "echo\n" },
    { "src/etc": "/etc" },
  );
  await lab.api("POST", "/v1/projects", { name: "git-hostile", kind: "service", source: hostile });
  const bad = await deployed("git-hostile");
  assert.equal(bad.status, "rolled_back");
  assert.match(phaseOf(bad, "prepare").reason ?? "", /bad tar: symlink etc points to an absolute path/);
  // A file mount whose path in the commit is a link is refused at resolve, naming it.
  const linked = gitRepo(
    "mounts-linked",
    { "compose.yaml": MOUNTING, "real.conf": "x\n", "src/a.sh": "echo\n" },
    { conf: "." },
  );
  await lab.api("POST", "/v1/projects", { name: "git-linked", kind: "service", source: linked });
  const refused = await deployed("git-linked");
  assert.equal(refused.status, "rolled_back");
  assert.match(phaseOf(refused, "resolve").reason ?? "", /conf is a symbolic link/);
});

async function shIn(env: string, script: string) {
  const r = await lab.api("POST", `/v1/envs/${encodeURIComponent(env)}/exec`, {
    service: "app",
    command: ["sh", "-c", script],
  });
  assert.equal(r.status, 200, JSON.stringify(r.data));
  return (r.data.stdout as string).trim();
}

async function tarOf(entries: Partial<tar.Header>[]): Promise<Uint8Array> {
  const pack = tar.pack();
  for (const e of entries) {
    const h = e as tar.Header;
    if (e.type === "file") pack.entry(h, "planted\n");
    else pack.entry(h);
  }
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack as unknown as AsyncIterable<Buffer>) chunks.push(c);
  return new Uint8Array(Buffer.concat(chunks));
}

test("a team's own tar named as a bind mount source: a link-then-write chain and a file seed that is a link are refused at prepare", async () => {
  await lab.api("POST", "/v1/projects", { name: "seed-attack", kind: "service", source: "/nowhere" });
  const upload = async (body: Uint8Array) => {
    const digest = `sha256:${createHash("sha256").update(body).digest("hex")}`;
    const r = await lab.api("PUT", `/v1/projects/seed-attack/contexts/${digest}`, body);
    assert.equal(r.status, 200, JSON.stringify(r.data));
    return digest;
  };
  const marker = join(work, `planted-${Date.now()}`);
  const chain = await upload(
    await tarOf([
      { name: "a", type: "symlink", linkname: "." },
      { name: "a/up", type: "symlink", linkname: ".." },
      { name: `a/up/${marker.slice(1)}`, type: "file", size: 8 },
    ]),
  );
  const fileLink = await upload(
    await tarOf([{ name: "app.conf", type: "symlink", linkname: "/etc/shadow" }]),
  );
  // The config file's tar and the folder's, named as the project's sources, then deployed.
  const deployWith = async (conf: string, folder: string) => {
    const put = await lab.api("PUT", "/v1/projects/seed-attack/source", {
      compose: MOUNTING,
      bind_sources: {
        "conf/app.conf": { digest: conf, type: "file" },
        src: { digest: folder, type: "directory" },
      },
    });
    assert.equal(put.status, 200, JSON.stringify(put.data));
    const d = await deployed("seed-attack");
    assert.equal(d.status, "rolled_back");
    return phaseOf(d, "prepare").reason ?? "";
  };
  assert.match(await deployWith(fileLink, chain), /bad tar: .*(absolute path|symbolic link)/);
  assert.throws(() => execFileSync("test", ["-e", marker]), "nothing was written outside the dataset");
  // The folder alone (the file seed fixed): the chain is still refused.
  const okFile = await upload(await tarOf([{ name: "app.conf", type: "file", size: 8 }]));
  assert.match(
    await deployWith(okFile, chain),
    /bad tar: .*goes through \(or replaces\) the symbolic link a/,
  );
  // A "file" whose tar holds a folder of that name: refused, not mounted.
  const dirAsFile = await upload(await tarOf([{ name: "app.conf", type: "directory" }]));
  const src = await upload(await tarOf([{ name: "main.sh", type: "file", size: 8 }]));
  assert.match(await deployWith(dirAsFile, src), /holds no regular file app\.conf/);
});
