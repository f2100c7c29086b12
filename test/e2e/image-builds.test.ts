/**
 * Host-side builds on the real engine, driven through the CLI as a user would: a multi-stage
 * Dockerfile (target, args, .dockerignore) built in prepare and pinned by its id; an unchanged
 * redeploy builds nothing; a changed file builds again; a compose project with two built services;
 * a build that fails rolls back with its log's tail in the reason (the log shown live while it
 * ran); and what a hostile team sends (forged digests, another team's contexts, host networking).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { type GitHttpServer, startGitHttpServer } from "../doubles/git-http-server.ts";
import { cliRunner } from "../harness/cli-runner.ts";
import { removeBuiltImages } from "../harness/engine.ts";
import { type Lab, openLab } from "../harness/lab.ts";
import { LOCAL_REGISTRY } from "../harness/test-host.ts";
import { waitFor } from "../harness/wait-for.ts";

let lab: Lab;
const work = mkdtempSync(join(tmpdir(), "denv-builds-"));
// In every context: an engine that kept an earlier run's images would otherwise (rightly) reuse them.
const nonce = `${Date.now()}-${Math.random()}\n`;

let gitServer: GitHttpServer;
const gitRoot = mkdtempSync(join(tmpdir(), "denv-builds-git-"));

before(async () => {
  gitServer = await startGitHttpServer(gitRoot);
  lab = await openLab({ fetchAllow: [...LOCAL_REGISTRY, gitServer.host] });
});

after(async () => {
  await lab?.close();
  await gitServer?.close();
  rmSync(gitRoot, { recursive: true, force: true });
  // The images this file built: the engine's build cache, needed by nothing after it.
  await removeBuiltImages(["multi", "pair", "owned", "breaks", "starter-", "from-git-build"]);
  rmSync(work, { recursive: true, force: true });
});

const denv = cliRunner(() => ({ url: lab.server.url, key: lab.keyA }));

function write(dir: string, files: Record<string, string>) {
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(join(dir, rel, ".."), { recursive: true });
    writeFileSync(join(dir, rel), text);
  }
}

const phase = (
  d: { phases: { name: string; evidence: any; reason: string | null; status: string }[] },
  name: string,
) => d.phases.find((p) => p.name === name) as { evidence: any; reason: string | null; status: string };

async function deploy(project: string) {
  const r = await denv("deploy", "--project", project, "--wait", "--json");
  return { ...r, d: JSON.parse(r.stdout) };
}

async function sh(env: string, service: string, script: string) {
  const r = await lab.api("POST", `/v1/envs/${encodeURIComponent(env)}/exec`, {
    service,
    command: ["sh", "-c", script],
  });
  assert.equal(r.status, 200, JSON.stringify(r.data));
  return { code: r.data.exit_code as number, out: (r.data.stdout as string).trim() };
}

const MULTI_STAGE = `FROM debian:bookworm AS builder
ARG GREETING=unset
RUN echo "$GREETING from the builder stage" > /built.txt
FROM debian:bookworm AS runtime
COPY --from=builder /built.txt /srv/built.txt
COPY message.txt /srv/
COPY . /srv/context/
CMD ["sleep", "infinity"]
FROM runtime AS never-built
RUN echo this stage is past the target && exit 9
`;

test("a multi-stage Dockerfile builds in prepare, pinned by id; unchanged builds nothing; a change builds again", async () => {
  const dir = join(work, "multi");
  write(dir, {
    "docker-compose.yaml": `x-denv:\n  kind: service\nservices:\n  app:\n    build:\n      context: ./app\n      target: runtime\n      args:\n        GREETING: hello\n`,
    "app/Dockerfile": MULTI_STAGE,
    "app/message.txt": "first\n",
    "app/secret.txt": "not for the image\n",
    "app/.dockerignore": "secret.txt\n",
    "app/nonce.txt": nonce,
  });
  const created = await denv("project", "create", "--kind", "service", "--source", dir, "multi");
  assert.equal(created.code, 0, created.stderr);
  // The context is uploaded with the source (create, then each deploy, uploads it when it changed).
  assert.match(created.stderr, /uploaded build context app \(\d+ entries/);

  const first = await deploy("multi");
  assert.equal(first.d.status, "succeeded", first.d.reason);
  assert.doesNotMatch(first.stderr, /uploaded build context/);
  const resolve = phase(first.d, "resolve").evidence;
  assert.match(resolve.builds.app.context_digest, /^sha256:[0-9a-f]{64}$/);
  assert.equal(resolve.builds.app.context, "app");
  const b1 = phase(first.d, "prepare").evidence.builds.app;
  assert.equal(b1.built, true);
  assert.equal(b1.target, "runtime");
  assert.equal(b1.context_digest, resolve.builds.app.context_digest);
  assert.match(b1.image_id, /^sha256:[0-9a-f]{64}$/);
  assert.ok(b1.steps >= 6, `steps ${b1.steps}`);
  assert.ok(
    b1.log_tail.some((l: string) => /Successfully built/.test(l)),
    b1.log_tail.join("\n"),
  );
  // The version's spec is pinned to the built image.
  const version = await lab.api("GET", `/v1/versions/${first.d.version_id}`);
  assert.equal(version.status, 200);
  const stack = await lab.api("GET", `/v1/envs/${encodeURIComponent("multi/alpha")}`);
  assert.equal(stack.status, 200);
  assert.equal((await sh("multi/alpha", "app", "cat /srv/built.txt")).out, "hello from the builder stage");
  assert.equal((await sh("multi/alpha", "app", "cat /srv/message.txt")).out, "first");
  // .dockerignore kept the secret out of the context, so out of the image.
  assert.equal((await sh("multi/alpha", "app", "test -e /srv/context/secret.txt")).code, 1);
  assert.equal((await sh("multi/alpha", "app", "test -e /srv/context/message.txt")).code, 0);

  const again = await deploy("multi");
  assert.equal(again.d.status, "succeeded", again.d.reason);
  assert.doesNotMatch(again.stderr, /uploaded build context/);
  const b2 = phase(again.d, "prepare").evidence.builds.app;
  assert.equal(b2.built, false, "an unchanged context built again");
  assert.equal(b2.image_id, b1.image_id);
  assert.equal(b2.context_digest, b1.context_digest);

  // Only the ignored file changed: the context, and so the image, are the same.
  writeFileSync(join(dir, "app/secret.txt"), "changed, still ignored\n");
  const ignored = await deploy("multi");
  assert.equal(phase(ignored.d, "prepare").evidence.builds.app.built, false);

  writeFileSync(join(dir, "app/message.txt"), "second\n");
  const changed = await deploy("multi");
  assert.equal(changed.d.status, "succeeded", changed.d.reason);
  const b3 = phase(changed.d, "prepare").evidence.builds.app;
  assert.equal(b3.built, true);
  assert.notEqual(b3.image_id, b1.image_id);
  assert.notEqual(b3.context_digest, b1.context_digest);
  assert.equal((await sh("multi/alpha", "app", "cat /srv/message.txt")).out, "second");
});

test("a compose project with two built services (one also named by image:) builds both and starts them", async () => {
  const dir = join(work, "pair");
  write(dir, {
    "docker-compose.yaml": `x-denv:
  kind: service
services:
  api:
    image: pair/api:dev
    build: ./api
    healthcheck:
      test: ["CMD", "test", "-f", "/srv/ready"]
      interval: 1s
      retries: 30
  worker:
    build:
      context: .
      dockerfile: worker/Dockerfile.worker
      args: [ROLE=worker]
    depends_on:
      api: {condition: service_healthy}
`,
    "api/Dockerfile": `FROM debian:bookworm\nRUN echo api > /srv/role\nCMD ["sh", "-c", "touch /srv/ready; exec sleep infinity"]\n`,
    "api/nonce.txt": nonce,
    "nonce.txt": nonce,
    "worker/Dockerfile.worker": `FROM debian:bookworm\nARG ROLE\nRUN echo "$ROLE" > /srv/role\nCOPY api/Dockerfile /srv/api.Dockerfile\nCMD ["sleep", "infinity"]\n`,
  });
  assert.equal((await denv("project", "create", "--kind", "service", "--source", dir, "pair")).code, 0);
  const r = await deploy("pair");
  assert.equal(r.d.status, "succeeded", r.d.reason);
  const builds = phase(r.d, "prepare").evidence.builds;
  assert.deepEqual(Object.keys(builds).sort(), ["api", "worker"]);
  assert.equal(builds.api.built, true);
  assert.equal(builds.worker.built, true);
  assert.notEqual(builds.api.image_id, builds.worker.image_id);
  assert.equal(builds.worker.dockerfile, "worker/Dockerfile.worker");
  assert.equal((await sh("pair/alpha", "api", "cat /srv/role")).out, "api");
  assert.equal((await sh("pair/alpha", "worker", "cat /srv/role")).out, "worker");
  assert.equal((await sh("pair/alpha", "worker", "head -1 /srv/api.Dockerfile")).out, "FROM debian:bookworm");
});

test("built images carry their team and project (not forgeable by build labels) and leave with the last version that pins them", async () => {
  const dir = join(work, "owned");
  write(dir, {
    "docker-compose.yaml": `x-denv:
  kind: service
services:
  app:
    build:
      context: ./app
      labels: {dev.denv.team: team_forged, dev.denv.project: prj_forged, keep.me: "yes"}
`,
    "app/Dockerfile": `FROM debian:bookworm\nCOPY nonce.txt /srv/nonce.txt\nCMD ["sleep", "infinity"]\n`,
    "app/nonce.txt": nonce,
  });
  assert.equal((await denv("project", "create", "--kind", "service", "--source", dir, "owned")).code, 0);
  const r = await deploy("owned");
  assert.equal(r.d.status, "succeeded", r.d.reason);
  const imageId = phase(r.d, "prepare").evidence.builds.app.image_id as string;
  const project = (await lab.api("GET", "/v1/projects/owned")).data;
  const labels = JSON.parse(
    execFileSync("docker", ["image", "inspect", "-f", "{{json .Config.Labels}}", imageId], {
      encoding: "utf8",
    }),
  );
  assert.equal(labels["dev.denv.project"], project.id);
  assert.match(labels["dev.denv.team"], /^team_[0-9a-z]+$/);
  assert.notEqual(labels["dev.denv.team"], "team_forged");
  assert.equal(labels["keep.me"], "yes");
  // While a version pins it, a prune leaves it; once the environment is gone and its versions
  // pruned, the image goes too.
  const kept = await denv("version", "prune", "--keep", "1", "--project", "owned", "--json");
  assert.equal(kept.code, 0, kept.stderr);
  assert.deepEqual(JSON.parse(kept.stdout).images_removed, []);
  assert.equal((await denv("env", "destroy", "owned/alpha")).code, 0);
  const pruned = await denv("version", "prune", "--keep", "1", "--project", "owned", "--json");
  assert.equal(pruned.code, 0, pruned.stderr);
  assert.deepEqual(JSON.parse(pruned.stdout).images_removed, [imageId]);
  assert.throws(() => execFileSync("docker", ["image", "inspect", imageId], { stdio: "ignore" }));

  // Deleting the project: refused while an environment lives (nothing removed), then everything
  // goes with it: its version's snapshots, its records, its built image; the name is free again.
  const again = await deploy("owned");
  assert.equal(again.d.status, "succeeded", again.d.reason);
  const rebuilt = phase(again.d, "prepare").evidence.builds.app.image_id as string;
  const refused = await denv("project", "delete", "owned");
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /live environments: alpha; destroy them first/);
  assert.equal(
    (await lab.api("GET", `/v1/envs/${encodeURIComponent("owned/alpha")}`)).data.status,
    "running",
  );
  assert.equal((await lab.api("DELETE", "/v1/projects/owned", undefined, lab.keyB)).status, 404);
  assert.equal((await denv("env", "destroy", "owned/alpha")).code, 0);
  const gone = await denv("project", "delete", "owned", "--json");
  assert.equal(gone.code, 0, gone.stderr);
  const out = JSON.parse(gone.stdout);
  assert.equal(out.versions_deleted.length, 1);
  assert.deepEqual(out.images_removed, [rebuilt]);
  assert.throws(() => execFileSync("docker", ["image", "inspect", rebuilt], { stdio: "ignore" }));
  assert.equal((await lab.api("GET", "/v1/projects/owned")).status, 404);
  assert.equal((await lab.api("GET", `/v1/versions/${again.d.version_id}`)).status, 404);
  assert.equal((await denv("project", "create", "--kind", "service", "--source", dir, "owned")).code, 0);
});

test("a build that fails rolls back with its log's tail in the reason; its log was shown while it ran", async () => {
  const dir = join(work, "breaks");
  write(dir, {
    "docker-compose.yaml": "x-denv:\n  kind: service\nservices:\n  app:\n    build: .\n",
    Dockerfile: `FROM debian:bookworm\nCMD ["sleep", "infinity"]\n`,
  });
  assert.equal((await denv("project", "create", "--kind", "service", "--source", dir, "breaks")).code, 0);
  const good = await deploy("breaks");
  assert.equal(good.d.status, "succeeded", good.d.reason);

  writeFileSync(
    join(dir, "Dockerfile"),
    `FROM debian:bookworm\nRUN echo live-line-marker && sleep 4 && echo about-to-fail && exit 3\nCMD ["sleep", "infinity"]\n`,
  );
  const started = await denv("deploy", "--project", "breaks", "--json");
  assert.equal(started.code, 0, started.stderr);
  const id = JSON.parse(started.stdout).id as string;
  // While the step runs, the prepare phase shows the log so far.
  let seenLive = false;
  let d: any;
  await waitFor(
    `deployment ${id}'s verdict, its build log read while it runs`,
    async () => {
      d = (await lab.api("GET", `/v1/deployments/${id}`)).data;
      const p = phase(d, "prepare");
      if (p.status === "running" && JSON.stringify(p.evidence ?? {}).includes("live-line-marker"))
        seenLive = true;
      return d.status !== "running" && d.status !== "queued";
    },
    { intervalMs: 200 },
  );
  assert.ok(seenLive, "the build's log was not shown while it ran");
  assert.equal(d.status, "rolled_back");
  const prepare = phase(d, "prepare");
  assert.equal(prepare.status, "failed");
  assert.match(prepare.reason ?? "", /building app failed: .*returned a non-zero code: 3/);
  assert.match(prepare.reason ?? "", /about-to-fail/);
  assert.equal(prepare.evidence.code, "build_failed");
  // The environment still serves the version the good build made.
  const env = (await lab.api("GET", `/v1/envs/${encodeURIComponent("breaks/alpha")}`)).data;
  assert.equal(env.status, "running");
  assert.equal(env.current_version_id, good.d.version_id);
});

test("hostile uploads: a forged digest, another team's context, a git project's upload, an unknown digest, host networking", async () => {
  const tarA = new Uint8Array(Buffer.alloc(10240));
  const { createHash } = await import("node:crypto");
  const digest = `sha256:${createHash("sha256").update(tarA).digest("hex")}`;
  const wrong = `sha256:${"0".repeat(64)}`;
  await lab.api("POST", "/v1/projects", { name: "up", kind: "service", source: "./up" });

  const forged = await lab.api("PUT", `/v1/projects/up/contexts/${wrong}`, tarA);
  assert.equal(forged.status, 400);
  assert.match(forged.data.error.message, /cut or changed/);
  assert.equal((await lab.api("GET", `/v1/projects/up/contexts/${wrong}`)).status, 404);
  assert.equal((await lab.api("PUT", "/v1/projects/up/contexts/not-a-digest", tarA)).status, 400);

  const ok = await lab.api("PUT", `/v1/projects/up/contexts/${digest}`, tarA);
  assert.equal(ok.status, 200, JSON.stringify(ok.data));
  assert.equal(ok.data.size_bytes, 10240);
  // Team B knows the digest: it still cannot see or use team A's context.
  await lab.api("POST", "/v1/projects", { name: "up", kind: "service", source: "./up" }, lab.keyB);
  assert.equal((await lab.api("GET", `/v1/projects/up/contexts/${digest}`, undefined, lab.keyB)).status, 404);
  const stolen = await lab.api(
    "PUT",
    "/v1/projects/up/source",
    { compose: "services:\n  app:\n    build: .\n", build_contexts: { ".": digest } },
    lab.keyB,
  );
  assert.equal(stolen.status, 400);
  assert.match(stolen.data.error.message, /was not uploaded/);
  const outside = await lab.api("PUT", "/v1/projects/up/source", {
    compose: "services:\n  app:\n    build: .\n",
    build_contexts: { "../../etc": digest },
  });
  assert.equal(outside.status, 400);

  await lab.api("POST", "/v1/projects", {
    name: "from-git",
    kind: "service",
    source: "http://127.0.0.1:5000/x.git",
  });
  assert.equal((await lab.api("PUT", `/v1/projects/from-git/contexts/${digest}`, tarA)).status, 409);

  // A build asking for the host's network is refused at resolve, where it is written.
  const dir = join(work, "hostnet");
  write(dir, {
    "docker-compose.yaml": "services:\n  app:\n    build:\n      context: .\n      network: host\n",
    Dockerfile: "FROM debian:bookworm\n",
  });
  assert.equal((await denv("project", "create", "--kind", "service", "--source", dir, "hostnet")).code, 0);
  const refused = await deploy("hostnet");
  assert.equal(refused.d.status, "rolled_back");
  assert.match(phase(refused.d, "resolve").reason ?? "", /services\.app\.build\.network .*host/);
});

test("denv init agent|service|website|inference: each starter deploys as it stands and answers", async () => {
  const probe = (port: number, request: string) =>
    `perl -MIO::Socket::INET -e '$s=IO::Socket::INET->new("127.0.0.1:${port}") or die; print $s "${request}"; print <$s>'`;
  const checks: Record<string, { service: string; script: string; expect: RegExp }> = {
    agent: { service: "box", script: "id -u; echo made > /work/x && cat /work/x", expect: /^1000\nmade$/ },
    service: { service: "web", script: probe(8080, "GET / HTTP/1.0\\r\\n\\r\\n"), expect: /hello from denv/ },
    website: {
      service: "site",
      script: probe(8080, "GET / HTTP/1.0\\r\\n\\r\\n"),
      expect: /<h1>It works<\/h1>/,
    },
    inference: {
      service: "model",
      script: probe(
        8000,
        'POST /v1/completions HTTP/1.0\\r\\nContent-Length: 16\\r\\n\\r\\n{\\"prompt\\": \\"hi\\"}',
      ),
      expect: /"text":"echo: hi"/,
    },
  };
  for (const [kind, check] of Object.entries(checks)) {
    const dir = join(work, `starter-${kind}`);
    const init = await denv("init", kind, dir);
    assert.equal(init.code, 0, init.stderr);
    const name = `starter-${kind}`;
    assert.equal((await denv("project", "create", "--kind", kind, "--source", dir, name)).code, 0);
    const r = await deploy(name);
    assert.equal(r.d.status, "succeeded", `${kind}: ${r.d.reason}`);
    assert.ok(phase(r.d, "prepare").evidence.builds, kind);
    const out = await sh(`${name}/alpha`, check.service, check.script);
    assert.equal(out.code, 0, `${kind}: ${out.out}`);
    assert.match(out.out, check.expect, kind);
  }
});

/**
 * Deploys through the API and follows the deployment to its verdict (up to 5 minutes); one that
 * does not end is reported with its phases, so a stall says where it stalled.
 */
async function deployed(project: string) {
  const started = await lab.api("POST", `/v1/projects/${project}/deploy`, { env: "alpha" });
  assert.equal(started.status, 202, JSON.stringify(started.data));
  let d = started.data;
  if (d.status === "running" || d.status === "queued")
    d = await waitFor(`deployment ${started.data.id}'s verdict`, async () => {
      const now = (await lab.api("GET", `/v1/deployments/${started.data.id}`)).data;
      return now.status === "running" || now.status === "queued" ? undefined : now;
    });
  assert.ok(
    d.status !== "running" && d.status !== "queued",
    `deployment of ${project} still ${d.status} after 5 minutes: ${JSON.stringify(d.phases.map((p: { name: string; status: string; evidence: unknown }) => [p.name, p.status, p.evidence]))}`,
  );
  return d;
}

test("a git source's build context is the commit's directory: built on the host, a link in it kept a link", async () => {
  const repo = join(gitRoot, "built.git");
  write(repo, {
    "compose.yaml":
      "x-denv:\n  kind: service\nservices:\n  app:\n    build:\n      context: app\n      args: {MARK: from-git}\n",
    "app/Dockerfile": `FROM debian:bookworm\nARG MARK\nRUN echo "$MARK" > /srv/mark\nCOPY . /srv/context/\nCMD ["sleep", "infinity"]\n`,
    "app/nonce.txt": nonce,
  });
  // A hostile repository's link to the server's files: archived as a link, never followed.
  symlinkSync("/etc/shadow", join(repo, "app/shadow"));
  const git = (...args: string[]) => execFileSync("git", ["-C", repo, ...args], { encoding: "utf8" });
  execFileSync("git", ["init", "-q", "-b", "main", repo]);
  git("add", ".");
  git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init");
  const commit = git("rev-parse", "HEAD").trim();
  const source = `${gitServer.url}/built.git`;
  assert.equal(
    (await lab.api("POST", "/v1/projects", { name: "from-git-build", kind: "service", source })).status,
    201,
  );
  const d = await deployed("from-git-build");
  assert.equal(d.status, "succeeded", d.reason);
  assert.equal(phase(d, "resolve").evidence.source.commit, commit);
  const b = phase(d, "prepare").evidence.builds.app;
  assert.equal(b.built, true);
  assert.equal(b.context_digest, phase(d, "resolve").evidence.builds.app.context_digest);
  assert.equal((await sh("from-git-build/alpha", "app", "cat /srv/mark")).out, "from-git");
  assert.equal((await sh("from-git-build/alpha", "app", "readlink /srv/context/shadow")).out, "/etc/shadow");
  assert.equal((await sh("from-git-build/alpha", "app", "test -L /srv/context/shadow")).code, 0);
  // Deployed again from the same commit: the same archive, nothing built.
  const again = await deployed("from-git-build");
  assert.equal(again.status, "succeeded", again.reason);
  assert.equal(phase(again, "prepare").evidence.builds.app.built, false);
  // A context path that is not a directory of the commit fails resolve with git's reason.
  const broken = join(gitRoot, "broken.git");
  write(broken, { "compose.yaml": "services:\n  app:\n    build: nowhere\n" });
  execFileSync("git", ["init", "-q", "-b", "main", broken]);
  execFileSync("git", ["-C", broken, "add", "."]);
  execFileSync("git", ["-C", broken, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]);
  await lab.api("POST", "/v1/projects", {
    name: "broken-git",
    kind: "service",
    source: `${gitServer.url}/broken.git`,
  });
  const bad = await deployed("broken-git");
  assert.equal(bad.status, "rolled_back");
  assert.match(phase(bad, "resolve").reason ?? "", /build context nowhere could not be read/);
});
