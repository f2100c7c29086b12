/**
 * Every route of the API, in process (Hono's app.request) against a real SQLite store and a host
 * double that speaks the typed protocol over a real WebSocket: each route with no key, a bad key,
 * another team's key, a malformed body, an oversize body and an unknown id, beside the request
 * that works. No Docker; the whole matrix runs in seconds.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Duplex } from "node:stream";
import { after, before, test } from "node:test";
import type { OpCheckedParams } from "@denv/protocol";
import { ComposeValidator, validateCompose } from "@denv/spec";
import { createApp } from "../app.ts";
import { SecretBox } from "../clouds/secret-box.ts";
import { Deployer } from "../deployments/deployer.ts";
import { E2B_CONTROL_OPERATIONS, ENVD_OPERATIONS } from "../e2b/e2b-operations.ts";
import { FetchPolicy } from "../fetch-policy.ts";
import { IngressNames } from "../ingress/ingress-names.ts";
import { needOfMethod } from "../people/access-rules.ts";
import { PortsOrigin } from "../ports-origin.ts";
import { insertCloud } from "../store/cloud-store.ts";
import { insertDeployment } from "../store/deployment-store.ts";
import { findOrCreateEnvironment, updateEnvironment } from "../store/environment-store.ts";
import { openStore, type Store } from "../store/open-store.ts";
import { signUp } from "../store/people-store.ts";
import { upsertPool } from "../store/pool-store.ts";
import { insertProject } from "../store/project-store.ts";
import { insertReplay } from "../store/replay-store.ts";
import { createApiKey, createApiKeyRecord, createTeam } from "../store/team-store.ts";
import { insertVersion } from "../store/version-store.ts";
import { DenvdHosts } from "../targets/denvd/denvd-hosts.ts";
import { type DoubleHandlers, HostDouble } from "../testing/host-double.ts";
import { type ApiRoute, JSON_LIMIT_BYTES } from "./api-route.ts";
import { API_ROUTES } from "./api-routes.ts";
import { errorSchema } from "./api-schemas.ts";

const hex = (n: number) => n.toString(16).padStart(12, "0");
let counter = 0;
const nextId = (prefix: "stk" | "ver") => `${prefix}_${hex(++counter + 0xabc000)}`;

const health = { services: { box: { healthy_ms: 5, method: "running" as const, checks: 0 } }, ms: 5 };
const egress = { result: "blocked" as const, target: "172.17.0.1:9", outcome: "timeout" as const, ms: 3 };
const entry = (path: string) => ({
  path,
  name: path.split("/").pop() ?? "",
  type: "file" as const,
  size: 3,
  mode: 0o644,
  uid: 1000,
  gid: 1000,
  owner: "ubuntu",
  group: "ubuntu",
  modified_at: new Date(0).toISOString(),
  link_target: null,
});
const handlers: DoubleHandlers = {
  snapshot: () => {
    const id = nextId("ver");
    return {
      version_id: id,
      images: { box: "127.0.0.1:5000/denv/box@sha256:0000" },
      evidence: { version_id: id, frozen_ms: 4, checkpoint: [], datasets: {}, health_after_ms: 1 },
    };
  },
  fork: (p: OpCheckedParams<"fork">) => {
    const id = nextId("stk");
    return {
      stack_id: id,
      evidence: {
        stack_id: id,
        from_version: p.version_id,
        clone_ms: 1,
        quota: {},
        start: {},
        start_ms: 2,
        health,
        egress,
        total_ms: 9,
      },
    };
  },
  rollback: () => ({ health, ms: 7 }),
  pause: () => ({ services: { box: { checkpoint_bytes: 4096, dump_ms: 3 } }, ms: 4 }),
  unpause: () => ({ health, ms: 5 }),
  set_egress: () => ({ closed: 1 }),
  egress_log: () => ({
    policy: { allow: ["pkg.mirror.test"], deny: [] },
    records: [],
    earlier: 0,
    dropped: 0,
  }),
  destroy: () => ({}),
  exec: (p: OpCheckedParams<"exec">, streams: (id: number) => Duplex) => {
    streams(p.stdout_stream).write("hello\n");
    return {
      exit_code: 0,
      stdout_truncated: false,
      stderr_truncated: false,
      stdout_dropped_bytes: 0,
      stderr_dropped_bytes: 0,
      timed_out: false,
      duration_ms: 2,
    };
  },
  put_files: async (p: OpCheckedParams<"put_files">, streams: (id: number) => Duplex) => {
    let bytes = 0;
    for await (const c of streams(p.tar_stream)) bytes += (c as Buffer).length;
    return { entries: 1, bytes };
  },
  get_files: (p: OpCheckedParams<"get_files">, streams: (id: number) => Duplex) => {
    streams(p.tar_stream).write(Buffer.alloc(1024));
    return { bytes: 1024 };
  },
  service_logs: (p: OpCheckedParams<"service_logs">, streams: (id: number) => Duplex) => {
    const line = { service: "box", stream: "stdout", time: "2026-12-06T14:00:00.000000001Z", line: "hello" };
    streams(p.logs_stream).write(`${JSON.stringify(line)}\n`);
    return { lines: 1 };
  },
  stop_service: (p: OpCheckedParams<"stop_service">) => ({ stopped: p.service }),
  stat_path: (p: OpCheckedParams<"stat_path">) => entry(p.path),
  diff: (p: OpCheckedParams<"diff">) => {
    const counts = { created: 1, deleted: 0, modified: 0, bytes_added: 3, bytes_removed: 0 };
    return {
      against: p.against ?? "",
      of: `${p.stack_id} (live)`,
      volumes: { w: { ...counts, method: "inode-ctime" as const, left_out: [] } },
      summary: counts,
      entries: [
        { volume: "w", path: "a.txt", change: "created" as const, type: "file" as const, bytes_after: 3 },
      ],
      truncated: false,
      bounds: {
        max_entries: p.max_entries ?? 10_000,
        max_text_bytes: 65536,
        max_diff_bytes: 1048576,
        max_compare_bytes: 1,
      },
      databases: [],
      ms: 1,
    };
  },
  list_path: (p: OpCheckedParams<"list_path">) => ({ entries: [entry(`${p.path}/a.txt`)] }),
  make_dir: () => ({ created: true }),
  remove_path: () => ({}),
  rename_path: () => ({}),
  verify_stop: () => ({ service: "box", frozen: true, ms: 1 }),
  verify_collect: () => ({ refused: null, files: [], file_count: 0, missing: [], bytes: 0 }),
  verify_grade: () => ({
    reward: 1,
    reason: null,
    exit_code: 0,
    timed_out: false,
    stdout_tail: "1\n",
    stderr_tail: "",
    ms: 3,
    mode: "image",
  }),
  verify_cleanup: () => ({}),
  resume: () => ({}),
  release_clock: () => ({ clock_at: null }),
  hold_clock: () => ({ clock_at: null }),
  check_health: () => health,
  digest_volumes: () => ({
    volumes: {
      w: { digest: "d0", files: 1, bytes: 3, entries: [["a.txt", "e0"]], listed_all: true, left_out: [] },
    },
    checkpoint: [],
    clock_held: false,
    ms: 1,
  }),
};

let dir: string;
let store: Store;
let hub: DenvdHosts;
let validator: ComposeValidator;
let upgrades: Server;
let double: HostDouble;
let app: ReturnType<typeof createApp>;
let keyA: string;
let keyB: string;
/** Team A's objects: another team's answers must never name them. */
const a = {
  project: "",
  env: "",
  doomed: "",
  /** Paused by its route's case (the others keep alpha running). */
  napper: "",
  version: "",
  deployment: "",
  replay: "rpl_000000000001",
  cloud: "ours",
  host: "",
  spareKey: "",
  member: "",
  /** Keys of team A with the roles below admin. */
  readOnlyKey: "",
  memberKey: "",
};

const REFUSALS_IN_ANSWER_SHAPE = new Set(["post /v1/github/webhook"]);

/** Routes whose JSON answers were checked against their schemas, successes and refusals apart. */
const fitted = { answers: new Set<string>(), errors: new Set<string>() };

/**
 * An answer is what its route's schema (the one the OpenAPI document is generated from) says: a
 * success parses with `response` and an error with the one error shape, and parsing drops nothing
 * (zod strips keys a schema does not name, so a field the document does not list is caught here).
 */
function assertAnswerFits(r: ApiRoute, status: number, type: string, text: string): void {
  const where = `${r.method} ${r.path} (${status})`;
  const kind = r.responseType ?? "json";
  // A route that answers in another protocol's terms (MCP's JSON-RPC, a port's own service) is
  // that protocol's; GitHub's webhook says its own refusals (a payload naming no repository) in
  // its answer's shape, and the server's (a key, a limit) in the one error shape.
  const schemas =
    kind === "any" || status === 204
      ? []
      : status >= 400
        ? [
            errorSchema,
            ...(REFUSALS_IN_ANSWER_SHAPE.has(`${r.method} ${r.path}`) && r.response ? [r.response] : []),
          ]
        : kind === "json" && r.response
          ? [r.response]
          : [];
  if (schemas.length === 0) return;
  assert.match(type, /application\/json/, `${where}: a JSON answer, not ${type}: ${text.slice(0, 200)}`);
  const answer = JSON.parse(text) as unknown;
  const parsed = schemas.map((x) => x.safeParse(answer));
  const fit = parsed.find((x) => x.success);
  assert.ok(fit, `${where} does not fit its schema: ${parsed[0]?.error?.message}\n${text.slice(0, 400)}`);
  assert.deepEqual(fit.data, answer, `${where} carries fields its schema does not name`);
  (status >= 400 ? fitted.errors : fitted.answers).add(`${r.method} ${r.path}`);
}

async function call(
  method: string,
  path: string,
  options: {
    key?: string | null;
    body?: string | Buffer;
    type?: string;
    headers?: Record<string, string>;
    /** The route asked: its answer is checked against its schema. */
    route?: ApiRoute;
  } = {},
): Promise<{ status: number; text: string; json: () => { error?: { code: string } } }> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.key) headers.authorization = `Bearer ${options.key}`;
  if (options.body !== undefined) headers["content-type"] = options.type ?? "application/json";
  const res = await app.request(path, { method, headers, body: options.body as string | undefined });
  const text = await res.text();
  if (options.route) assertAnswerFits(options.route, res.status, res.headers.get("content-type") ?? "", text);
  return { status: res.status, text, json: () => JSON.parse(text) };
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "denv-routes-"));
  store = await openStore(join(dir, "store"));
  const secrets = SecretBox.open(join(dir, "store"));
  hub = new DenvdHosts(store, { waitForHostMs: 2000 });
  validator = new ComposeValidator({ workers: 1 });
  // Fetches nothing: a deploy's resolve cannot reach any registry from here.
  const fetchPolicy = new FetchPolicy([]);
  const deployer = new Deployer({
    store,
    stacks: hub.stacks,
    secrets,
    validator,
    fetchPolicy,
    joinWaitMs: 1000,
  });
  mkdirSync(join(dir, "dist"));
  writeFileSync(join(dir, "dist", "denvd.version"), "0.1.0+test\n");
  app = createApp({
    portsOrigin: new PortsOrigin("http://localhost:1"),
    ingress: new IngressNames({ domain: "denv.test", scheme: "http" }, (l) => secrets.derive(l)),
    store,
    stacks: hub.stacks,
    deployer,
    secrets,
    fetchPolicy,
    downloadsDir: join(dir, "dist"),
    joinTokenTtlMs: 60_000,
    log: () => {},
  });
  upgrades = createServer((_req, res) => res.writeHead(404).end());
  upgrades.on("upgrade", (req, socket, head) => hub.handleUpgrade(req, socket, head));
  await new Promise<void>((r) => upgrades.listen(0, "127.0.0.1", r));
  const teamA = await createTeam(store, "a", true);
  keyA = await createApiKey(store, teamA, "a", true);
  keyB = await createApiKey(store, await createTeam(store, "b"), "b", false);
  // A second key of team A (to revoke) and a member of team A (to change and remove).
  a.spareKey = (await createApiKeyRecord(store, teamA, "spare", false)).id;
  a.readOnlyKey = (
    await createApiKeyRecord(store, teamA, "looker", false, undefined, { userId: null, role: "read-only" })
  ).secret;
  a.memberKey = (
    await createApiKeyRecord(store, teamA, "doer", false, undefined, { userId: null, role: "member" })
  ).secret;
  const member = await signUp(store, {
    email: "member@example.com",
    password: "long enough 1",
    teamName: "m",
  });
  await store
    .insertInto("memberships")
    .values({ user_id: member.userId, team_id: teamA, role: "member", created_at: new Date().toISOString() })
    .execute();
  a.member = member.userId;

  // Team A's host: joined through the API, then the double dials in with its secret.
  const token = (await call("POST", "/v1/hosts/join-token", { key: keyA })).json() as unknown as {
    token: string;
  };
  const joined = (
    await call("POST", "/v1/hosts/join", { body: JSON.stringify({ token: token.token, name: "double" }) })
  ).json() as unknown as { host_id: string; secret: string };
  double = new HostDouble(handlers);
  const port = (upgrades.address() as { port: number }).port;
  a.host = await double.connect(`ws://127.0.0.1:${port}/v1/hosts/connect`, joined.secret);
  assert.equal(a.host, joined.host_id);

  // A project with a running environment and a version, as a deploy leaves them.
  const r = validateCompose(
    'x-denv: { kind: agent }\nservices:\n  box: { image: "127.0.0.1:5000/denv/box:1", user: "1000", volumes: [w:/work] }\nvolumes: { w: {} }\n',
    { env: {} },
  );
  assert.ok(r.ok);
  const project = {
    id: "prj_000000000001",
    team_id: teamA,
    name: "p",
    kind: "agent",
    source_type: "local",
    source: "./p",
    compose_text: null,
    dotenv_text: null,
    pinned_target: null,
    created_at: new Date().toISOString(),
  };
  await insertProject(store, project);
  a.project = project.id;
  a.version = "ver_000000000001";
  for (const name of ["alpha", "doomed", "napper"]) {
    const env = await findOrCreateEnvironment(store, project, name);
    await updateEnvironment(store, env.id, {
      status: "running",
      host_id: a.host,
      stack_id: nextId("stk"),
      current_version_id: a.version,
    });
    if (name === "alpha") a.env = env.id;
    else if (name === "doomed") a.doomed = env.id;
    else a.napper = env.id;
  }
  await insertVersion(store, {
    id: a.version,
    team_id: teamA,
    project_id: project.id,
    environment_id: a.env,
    host_id: a.host,
    target_id: "denvd",
    spec_json: secrets.sealText(JSON.stringify(r.spec)),
    spec_hash: r.spec.hash,
    images_json: "{}",
    evidence_json: "{}",
    created_at: new Date().toISOString(),
  });
  // A version's pool, empty until a case sets its size.
  await upsertPool(store, { team_id: teamA, project_id: project.id, version_id: a.version }, 0, "api");
  await insertReplay(store, {
    id: a.replay,
    team_id: teamA,
    version_id: a.version,
    status: "identical",
    request_json: JSON.stringify({ forks: 1, parallel: 1, steps: [{ command: "true" }] }),
    report_json: "{}",
    created_at: new Date().toISOString(),
    finished_at: new Date().toISOString(),
  });
  a.deployment = "dep_000000000001";
  await insertDeployment(store, {
    id: a.deployment,
    team_id: teamA,
    environment_id: a.env,
    kind: "deploy",
    status: "succeeded",
    phases_json: "[]",
    reason: null,
    state_json: "{}",
    created_at: new Date().toISOString(),
    finished_at: new Date().toISOString(),
    lease_owner: null,
    lease_until: null,
  });
  await insertCloud(store, {
    id: "cld_000000000001",
    team_id: teamA,
    name: a.cloud,
    provider: "hetzner",
    token_sealed: secrets.seal("t"),
    server_type: "cx22",
    location: "fsn1",
    api_url: null,
    created_at: new Date().toISOString(),
  });
});

after(async () => {
  double?.close();
  hub?.close();
  upgrades?.close();
  await validator?.close();
  await store?.destroy();
  rmSync(dir, { recursive: true, force: true });
});

/** What makes each route work for team A: its path's ids, its body, its query, what it answers. */
interface Case {
  path: () => string;
  body?: () => unknown;
  /** A raw body (the tar routes). */
  raw?: Buffer;
  query?: string;
  /** Headers the route needs to do its work (MCP's Accept). */
  headers?: Record<string, string>;
  status: number;
}
const tar = Buffer.alloc(1024);
const tarDigest = `sha256:${createHash("sha256").update(tar).digest("hex")}`;
const CASES: Record<string, Case> = {
  "get /v1/openapi.json": { path: () => "/v1/openapi.json", status: 200 },
  "get /install.sh": { path: () => "/install.sh", status: 200 },
  "get /v1/downloads/{file}": { path: () => "/v1/downloads/denvd.version", status: 200 },
  "post /v1/teams": { path: () => "/v1/teams", body: () => ({ name: "c" }), status: 201 },
  "post /v1/hosts/join-token": { path: () => "/v1/hosts/join-token", status: 201 },
  "post /v1/hosts/join": { path: () => "/v1/hosts/join", body: () => ({ token: "djt_used" }), status: 401 },
  "post /v1/auth/signup": {
    path: () => "/v1/auth/signup",
    body: () => ({ email: "new@example.com", password: "correct horse battery" }),
    status: 201,
  },
  "post /v1/auth/login": {
    path: () => "/v1/auth/login",
    body: () => ({ email: "new@example.com", password: "correct horse battery" }),
    status: 200,
  },
  // A key is not a person: the session routes are the console's.
  "get /v1/auth/session": { path: () => "/v1/auth/session", status: 403 },
  "post /v1/auth/team": { path: () => "/v1/auth/team", body: () => ({ team_id: "x" }), status: 403 },
  "post /v1/auth/logout": { path: () => "/v1/auth/logout", status: 403 },
  "get /v1/keys": { path: () => "/v1/keys", status: 200 },
  "post /v1/keys": { path: () => "/v1/keys", body: () => ({ name: "for e2b", format: "e2b" }), status: 201 },
  "delete /v1/keys/{id}": { path: () => `/v1/keys/${a.spareKey}`, status: 200 },
  "get /v1/members": { path: () => "/v1/members", status: 200 },
  "put /v1/members/{id}": {
    path: () => `/v1/members/${a.member}`,
    body: () => ({ role: "read-only" }),
    status: 200,
  },
  "delete /v1/members/{id}": { path: () => `/v1/members/${a.member}`, status: 200 },
  "post /v1/invitations": {
    path: () => "/v1/invitations",
    body: () => ({ email: "invited@example.com" }),
    status: 201,
  },
  "get /v1/invitations": { path: () => "/v1/invitations", status: 200 },
  "post /v1/invitations/{token}/accept": { path: () => "/v1/invitations/dinv_nobody/accept", status: 404 },
  "post /v1/device/code": { path: () => "/v1/device/code", body: () => ({ client_name: "ci" }), status: 201 },
  "post /v1/device/token": {
    path: () => "/v1/device/token",
    body: () => ({ device_code: "ddc_nobody" }),
    status: 404,
  },
  "get /v1/device/{code}": { path: () => "/v1/device/BCDF-GHJK", status: 403 },
  "post /v1/device/{code}": {
    path: () => "/v1/device/BCDF-GHJK",
    body: () => ({ approve: true }),
    status: 403,
  },
  "get /v1/hosts": { path: () => "/v1/hosts", status: 200 },
  // Drained, then (the next route in order) taken back: the team's only host, so nothing is copied.
  "post /v1/hosts/{id}/drain": { path: () => `/v1/hosts/${a.host}/drain`, status: 200 },
  "delete /v1/hosts/{id}/drain": { path: () => `/v1/hosts/${a.host}/drain`, status: 200 },
  "post /v1/projects": {
    path: () => "/v1/projects",
    body: () => ({ name: "q", kind: "agent", source: "./q" }),
    status: 201,
  },
  "get /v1/projects": { path: () => "/v1/projects", status: 200 },
  "get /v1/projects/{id}": { path: () => `/v1/projects/${a.project}`, status: 200 },
  // The project has a live environment: refused, naming it (deleting it is the e2e test's).
  "delete /v1/projects/{id}": { path: () => `/v1/projects/${a.project}`, status: 409 },
  // A local project deploys no branches (github.test.ts sets them on a github: one).
  "put /v1/projects/{id}/branches": {
    path: () => `/v1/projects/${a.project}/branches`,
    body: () => ({ branches: ["feature/*"] }),
    status: 400,
  },
  "get /v1/projects/{id}/github": { path: () => `/v1/projects/${a.project}/github`, status: 200 },
  "get /v1/projects/{id}/previews": { path: () => `/v1/projects/${a.project}/previews`, status: 200 },
  "put /v1/projects/{id}/previews": {
    path: () => `/v1/projects/${a.project}/previews`,
    body: () => ({ budget: 2, forks: "approve" }),
    status: 200,
  },
  // No fork's head waits in this project (github.test.ts and fork-previews.test.ts approve one).
  "post /v1/projects/{id}/previews/{number}/approve": {
    path: () => `/v1/projects/${a.project}/previews/1/approve`,
    status: 404,
  },
  "put /v1/projects/{id}/source": {
    path: () => `/v1/projects/${a.project}/source`,
    body: () => ({ compose: "services: {}\n" }),
    status: 200,
  },
  "put /v1/projects/{id}/contexts/{digest}": {
    path: () => `/v1/projects/${a.project}/contexts/${tarDigest}`,
    raw: tar,
    status: 200,
  },
  "get /v1/projects/{id}/contexts/{digest}": {
    path: () => `/v1/projects/${a.project}/contexts/${tarDigest}`,
    status: 200,
  },
  "post /v1/projects/{id}/deploy": {
    path: () => `/v1/projects/${a.project}/deploy`,
    body: () => ({ env: "beta" }),
    status: 202,
  },
  "get /v1/deployments/{id}": { path: () => `/v1/deployments/${a.deployment}`, status: 200 },
  "get /v1/deployments/{id}/events": { path: () => `/v1/deployments/${a.deployment}/events`, status: 200 },
  // It has ended (succeeded): nothing to cancel (deployment-cancel.test.ts cancels a running one).
  "post /v1/deployments/{id}/cancel": { path: () => `/v1/deployments/${a.deployment}/cancel`, status: 409 },
  "get /v1/envs": { path: () => "/v1/envs", status: 200 },
  "get /v1/envs/{id}": { path: () => `/v1/envs/${a.env}`, status: 200 },
  "get /v1/envs/{id}/deployments": { path: () => `/v1/envs/${a.env}/deployments`, status: 200 },
  "delete /v1/envs/{id}": { path: () => `/v1/envs/${a.doomed}`, status: 200 },
  "post /v1/envs/{id}/snapshot": { path: () => `/v1/envs/${a.env}/snapshot`, status: 200 },
  "post /v1/envs/{id}/fork": {
    path: () => `/v1/envs/${a.env}/fork`,
    body: () => ({ name: "f1" }),
    status: 201,
  },
  "get /v1/pools": { path: () => "/v1/pools", status: 200 },
  // Draining a pool of image sandboxes there is none of (the double cannot make one: no registry).
  "put /v1/pools": { path: () => "/v1/pools", body: () => ({ size: 0, image: "img" }), status: 404 },
  "get /v1/pools/{id}": { path: () => `/v1/pools/${a.version}`, status: 200 },
  "put /v1/pools/{id}": { path: () => `/v1/pools/${a.version}`, body: () => ({ size: 1 }), status: 200 },
  "delete /v1/pools/{id}": { path: () => `/v1/pools/${a.version}`, status: 200 },
  "get /v1/admission": { path: () => "/v1/admission", status: 200 },
  "post /v1/versions/{id}/forks": {
    path: () => `/v1/versions/${a.version}/forks`,
    body: () => ({ count: 3, name_prefix: "fan" }),
    status: 200,
  },
  "post /v1/versions/{id}/replays": {
    path: () => `/v1/versions/${a.version}/replays`,
    query: "?wait=true",
    body: () => ({ forks: 2, parallel: 2, steps: [{ service: "box", command: "date" }] }),
    status: 200,
  },
  "get /v1/versions/{id}/replays": { path: () => `/v1/versions/${a.version}/replays`, status: 200 },
  "get /v1/replays/{id}": { path: () => `/v1/replays/${a.replay}`, status: 200 },
  "get /v1/versions": { path: () => "/v1/versions", status: 200 },
  // In use: alpha runs it; the answer names what keeps it.
  "delete /v1/versions/{id}": { path: () => `/v1/versions/${a.version}`, status: 409 },
  "post /v1/versions/prune": {
    path: () => "/v1/versions/prune",
    body: () => ({ keep: 1, dry_run: true }),
    status: 200,
  },
  // To the host that already holds it: nothing is sent (the copying is the fleet e2e test's).
  "post /v1/versions/{id}/replicas": {
    path: () => `/v1/versions/${a.version}/replicas`,
    body: () => ({ host: a.host }),
    status: 201,
  },
  // One copy: the host that took it is enough, so none is made.
  "put /v1/versions/{id}/replicas": {
    path: () => `/v1/versions/${a.version}/replicas`,
    body: () => ({ copies: 1 }),
    status: 200,
  },
  "get /v1/versions/{id}/spec": { path: () => `/v1/versions/${a.version}/spec`, status: 200 },
  "get /v1/versions/{id}/datasheet": {
    path: () => `/v1/versions/${a.version}/datasheet`,
    query: "?format=markdown",
    status: 200,
  },
  "post /v1/projects/{id}/promote": {
    path: () => `/v1/projects/${a.project}/promote`,
    query: "?wait=true",
    body: () => ({ from: "alpha", to: "staging", replays: 1, soak_ms: 0, steps: [{ command: "date" }] }),
    status: 200,
  },
  "post /v1/envs/{id}/rollback": {
    path: () => `/v1/envs/${a.env}/rollback`,
    body: () => ({ version: a.version }),
    status: 200,
  },
  // alpha runs: nothing a verify froze to thaw (e2e/verify-resume covers a real thaw).
  "post /v1/envs/{id}/resume": { path: () => `/v1/envs/${a.env}/resume`, status: 409 },
  "post /v1/envs/{id}/pause": { path: () => `/v1/envs/${a.napper}/pause`, status: 200 },
  "patch /v1/envs/{id}/egress": {
    path: () => `/v1/envs/${a.env}/egress`,
    body: () => ({ allow: ["PKG.Mirror.Test."], deny: [] }),
    status: 200,
  },
  "get /v1/envs/{id}/egress": { path: () => `/v1/envs/${a.env}/egress`, query: "?limit=10", status: 200 },
  "post /v1/envs/{id}/verify": {
    path: () => `/v1/envs/${a.env}/verify`,
    body: () => ({ resume: true }),
    status: 200,
  },
  "post /v1/envs/{id}/exec": {
    path: () => `/v1/envs/${a.env}/exec`,
    body: () => ({ command: "true" }),
    status: 200,
  },
  "post /v1/envs/{id}/exec/stream": {
    path: () => `/v1/envs/${a.env}/exec/stream`,
    raw: Buffer.from('{"command":["cat"]}\nsome stdin'),
    status: 200,
  },
  "put /v1/envs/{id}/files": {
    path: () => `/v1/envs/${a.env}/files`,
    query: "?path=/work",
    raw: tar,
    status: 200,
  },
  "get /v1/envs/{id}/files": { path: () => `/v1/envs/${a.env}/files`, query: "?path=/work", status: 200 },
  "get /v1/deployments": { path: () => "/v1/deployments", query: "?running=false&limit=5", status: 200 },
  "get /v1/envs/{id}/logs": { path: () => `/v1/envs/${a.env}/logs`, query: "?tail=5", status: 200 },
  "get /v1/envs/{id}/diff": { path: () => `/v1/envs/${a.env}/diff`, query: "?max_entries=5", status: 200 },
  "get /v1/envs/{id}/files/stat": {
    path: () => `/v1/envs/${a.env}/files/stat`,
    query: "?path=/work",
    status: 200,
  },
  "get /v1/envs/{id}/files/list": {
    path: () => `/v1/envs/${a.env}/files/list`,
    query: "?path=/work&depth=2",
    status: 200,
  },
  "post /v1/envs/{id}/files/mkdir": {
    path: () => `/v1/envs/${a.env}/files/mkdir`,
    body: () => ({ path: "/work/new" }),
    status: 200,
  },
  "delete /v1/envs/{id}/files": {
    path: () => `/v1/envs/${a.env}/files`,
    query: "?path=/work/old",
    status: 200,
  },
  "post /v1/envs/{id}/files/rename": {
    path: () => `/v1/envs/${a.env}/files/rename`,
    body: () => ({ from: "/work/a", to: "/work/b" }),
    status: 200,
  },
  "post /v1/envs/{id}/ports/{port}": {
    path: () => `/v1/envs/${a.env}/ports/8080`,
    body: () => ({}),
    status: 201,
  },
  "get /v1/envs/{id}/ports": { path: () => `/v1/envs/${a.env}/ports`, status: 200 },
  "get /v1/envs/{id}/ingress": { path: () => `/v1/envs/${a.env}/ingress`, status: 200 },
  "delete /v1/envs/{id}/ports": { path: () => `/v1/envs/${a.env}/ports`, status: 200 },
  "delete /v1/envs/{id}/ports/{port}": { path: () => `/v1/envs/${a.env}/ports/8080`, status: 200 },
  "get /v1/tunnels/{token}/{path}": { path: () => "/v1/tunnels/dpt_unknown/x", status: 404 },
  "post /v1/envs/{id}/services/{service}/stop": {
    path: () => `/v1/envs/${a.env}/services/box/stop`,
    status: 200,
  },
  "get /v1/versions/{id}": { path: () => `/v1/versions/${a.version}`, status: 200 },
  "post /v1/mcp": {
    path: () => "/v1/mcp",
    body: () => ({
      jsonrpc: "2.0",
      id: 1,
      method: "initialize",
      params: {
        protocolVersion: "2025-06-18",
        capabilities: {},
        clientInfo: { name: "matrix", version: "1" },
      },
    }),
    headers: { accept: "application/json, text/event-stream" },
    status: 200,
  },
  // Without a session (an initialize first) there is nothing to stream or to end.
  "get /v1/mcp": { path: () => "/v1/mcp", status: 400 },
  "delete /v1/mcp": { path: () => "/v1/mcp", status: 400 },
  "post /v1/sandboxes": {
    path: () => "/v1/sandboxes",
    body: () => ({ from_version: a.version, name: "sbx1" }),
    status: 201,
  },
  // Connecting a cloud calls the provider; a provider denv does not drive yet is refused first.
  "post /v1/clouds": {
    path: () => "/v1/clouds",
    body: () => ({ provider: "e2b", name: "other", token: "t", server_type: "x", location: "y" }),
    status: 400,
  },
  "get /v1/clouds": { path: () => "/v1/clouds", status: 200 },
  // A key that is not a PEM key is refused before GitHub is called (the e2e test connects one).
  "post /v1/github/apps": {
    path: () => "/v1/github/apps",
    body: () => ({ app_id: "1", private_key: "not a key", webhook_secret: "sixteen characters" }),
    status: 400,
  },
  "get /v1/github/apps": { path: () => "/v1/github/apps", status: 200 },
  "delete /v1/github/apps/{app_id}": { path: () => "/v1/github/apps/12345", status: 404 },
  "get /v1/github/repositories": { path: () => "/v1/github/repositories", status: 200 },
  "get /v1/github/deliveries": { path: () => "/v1/github/deliveries", status: 200 },
  // Unsigned and naming no App: refused before anything is read (github.test.ts sends signed ones).
  "post /v1/github/webhook": { path: () => "/v1/github/webhook", body: () => ({ zen: "hi" }), status: 400 },
  "delete /v1/clouds/{name}": { path: () => `/v1/clouds/${a.cloud}`, status: 200 },
  "get /v1/targets": { path: () => "/v1/targets", status: 200 },
  "post /v1/targets/{name}/sandboxes": {
    path: () => "/v1/targets/denvd/sandboxes",
    body: () => ({ from_version: a.version, name: "sbx2" }),
    status: 201,
  },
};

const keyOf = (r: { method: string; path: string }) => `${r.method} ${r.path}`;
const bodyOf = (c: Case) => (c.raw ? c.raw : c.body ? JSON.stringify(c.body()) : undefined);
const typeOf = (c: Case) => (c.raw ? "application/x-tar" : undefined);
/** The path with its object id (or name) replaced by one nobody has. */
const unknownPath = (r: { path: string }, c: Case) => {
  const real = c.path();
  const template = r.path.split("/");
  return real
    .split("/")
    .map((seg, i) => (/^\{(id|name|file|token)\}$/.test(template[i] ?? "") ? "nope_0123456789ab" : seg))
    .join("/");
};

test("every route has a case in the matrix (a new route cannot go untested)", () => {
  assert.deepEqual(
    API_ROUTES.map(keyOf).filter((k) => !CASES[k]),
    [],
  );
});

test("no key and a bad key: 401 on every keyed route, before anything is read or done", async () => {
  for (const r of API_ROUTES.filter((x) => x.auth)) {
    const c = CASES[keyOf(r)] as Case;
    for (const key of [null, "dk_not_a_key"]) {
      const res = await call(r.method.toUpperCase(), c.path() + (c.query ?? ""), {
        route: r,
        key,
        body: bodyOf(c),
        type: typeOf(c),
      });
      assert.equal(res.status, 401, `${keyOf(r)} with ${key ?? "no key"}: ${res.text}`);
      assert.equal(res.json().error?.code, "unauthenticated");
    }
  }
  assert.equal(double.calls.length, 0, "nothing reached the host");
});

test("another team's key: its objects are 404, its lists hold none of ours, and admin routes are 403", async () => {
  const ours = () => [
    a.project,
    a.env,
    a.doomed,
    a.napper,
    a.version,
    a.deployment,
    a.replay,
    a.host,
    `"${a.cloud}"`,
  ];
  for (const r of API_ROUTES.filter((x) => x.auth)) {
    const c = CASES[keyOf(r)] as Case;
    const res = await call(r.method.toUpperCase(), c.path() + (c.query ?? ""), {
      route: r,
      key: keyB,
      body: bodyOf(c),
      type: typeOf(c),
    });
    const what = `${keyOf(r)} as team B: ${res.status} ${res.text.slice(0, 200)}`;
    if (r.path === "/v1/teams") assert.equal(res.status, 403, what);
    else if (/\{(id|name)\}/.test(r.path) && r.path !== "/v1/targets/{name}/sandboxes")
      assert.equal(res.status, 404, what);
    // The answer may repeat what was asked for; it names nothing else of team A's.
    const asked = c.path() + (bodyOf(c)?.toString() ?? "");
    for (const id of ours().filter((x) => !asked.includes(x.replaceAll('"', ""))))
      assert.ok(!res.text.includes(id), `${what} names ${id}`);
  }
  assert.equal(double.calls.length, 0, "nothing reached team A's host");
});

test("a read-only key is refused every route that changes, and a member every admin route, before anything is done", async () => {
  const calls = double.calls.length;
  for (const r of API_ROUTES.filter((x) => x.auth)) {
    const c = CASES[keyOf(r)] as Case;
    const needs = r.needs ?? needOfMethod(r.method);
    for (const [who, key, refused] of [
      ["read-only", a.readOnlyKey, needs !== "read"],
      ["member", a.memberKey, needs === "admin"],
    ] as const) {
      if (!refused) continue;
      const res = await call(r.method.toUpperCase(), c.path() + (c.query ?? ""), {
        route: r,
        key,
        body: bodyOf(c),
        type: typeOf(c),
        ...(c.headers ? { headers: c.headers } : {}),
      });
      assert.equal(res.status, 403, `${keyOf(r)} as ${who}: ${res.text.slice(0, 200)}`);
      assert.equal(res.json().error?.code, "forbidden");
    }
  }
  assert.equal(double.calls.length, calls, "nothing reached the host");
});

test("a malformed body: 400 invalid_argument saying where, on every route that takes one", async () => {
  for (const r of API_ROUTES.filter((x) => x.body)) {
    const c = CASES[keyOf(r)] as Case;
    const key = r.auth ? keyA : null;
    for (const body of ["{", '{"__bogus": 1}', "[]"]) {
      const res = await call(r.method.toUpperCase(), c.path(), { key, body, route: r });
      assert.equal(res.status, 400, `${keyOf(r)} with ${body}: ${res.text}`);
      assert.equal(res.json().error?.code, "invalid_argument");
    }
  }
});

test("an oversize body: 413 on every route that takes a body, whatever its limit", async () => {
  // Bodies that stream (never held whole) count their own limit as they come; port URLs have none.
  assert.deepEqual(API_ROUTES.filter((x) => x.bodyLimitBytes === null).map(keyOf), [
    "put /v1/projects/{id}/contexts/{digest}",
    "post /v1/envs/{id}/exec/stream",
    "put /v1/envs/{id}/files",
    "get /v1/tunnels/{token}/{path}",
  ]);
  for (const k of [
    "post /v1/envs/{id}/exec/stream",
    "put /v1/envs/{id}/files",
    "put /v1/projects/{id}/contexts/{digest}",
  ]) {
    const c = CASES[k] as Case;
    const res = await app.request(c.path() + (c.query ?? ""), {
      method: k.split(" ")[0]?.toUpperCase(),
      headers: { authorization: `Bearer ${keyA}`, "content-length": String(2 ** 40) },
      body: c.raw as Buffer,
    });
    assert.equal(res.status, 413, `${k} declaring 1 TiB`);
    assert.equal(((await res.json()) as { error: { code: string } }).error.code, "payload_too_large");
  }
  for (const r of API_ROUTES.filter((x) => x.method !== "get" && x.bodyLimitBytes !== null)) {
    const c = CASES[keyOf(r)] as Case;
    const limit = r.bodyLimitBytes ?? JSON_LIMIT_BYTES;
    // Sent with no declared length (counted as it is read), and with its length declared (refused
    // from the header alone); a route anyone may call reads nothing before its own checks.
    for (const declared of [false, true]) {
      if (!declared && !r.auth && r.path === "/v1/github/webhook") continue;
      const res = await call(r.method.toUpperCase(), c.path() + (c.query ?? ""), {
        route: r,
        key: r.auth ? keyA : null,
        body: Buffer.alloc(limit + 1, 0x20),
        type: typeOf(c),
        ...(declared ? { headers: { "content-length": String(limit + 1) } } : {}),
      });
      assert.equal(res.status, 413, `${keyOf(r)} with ${limit + 1} bytes: ${res.text.slice(0, 200)}`);
      assert.equal(res.json().error?.code, "payload_too_large");
    }
  }
});

test("an unknown id: 404 on every route that names an object", async () => {
  for (const r of API_ROUTES.filter((x) => /\{(id|name|file|token)\}/.test(x.path))) {
    const c = CASES[keyOf(r)] as Case;
    const res = await call(r.method.toUpperCase(), unknownPath(r, c) + (c.query ?? ""), {
      route: r,
      key: r.auth ? keyA : null,
      body: bodyOf(c),
      type: typeOf(c),
    });
    assert.equal(res.status, 404, `${keyOf(r)} at ${unknownPath(r, c)}: ${res.text.slice(0, 200)}`);
    assert.equal(res.json().error?.code, "not_found");
  }
});

test("and with the right key and body each route does its work, through the host where it must", async () => {
  for (const r of API_ROUTES) {
    const c = CASES[keyOf(r)] as Case;
    const res = await call(r.method.toUpperCase(), c.path() + (c.query ?? ""), {
      route: r,
      key: r.auth ? keyA : null,
      body: bodyOf(c),
      type: typeOf(c),
      ...(c.headers ? { headers: c.headers } : {}),
    });
    assert.equal(res.status, c.status, `${keyOf(r)}: ${res.text.slice(0, 300)}`);
  }
  const methods = new Set(double.calls.map((x) => x.method));
  for (const m of [
    "exec",
    "put_files",
    "get_files",
    "service_logs",
    "stop_service",
    "snapshot",
    "fork",
    "rollback",
    "destroy",
  ])
    assert.ok(methods.has(m as never), `the host was asked to ${m}`);
  for (const m of ["verify_stop", "verify_collect", "verify_grade", "resume"])
    assert.ok(methods.has(m as never), `verify asked the host to ${m}`);
  assert.ok(methods.has("digest_volumes"), "a replay asked the host to digest_volumes");
});

test("every JSON answer the matrix got fits its route's schema: each route's success and refusals were checked", () => {
  const json = (r: ApiRoute) => (r.responseType ?? "json") === "json";
  const succeeding = API_ROUTES.filter(
    (r) => json(r) && r.response && (CASES[keyOf(r)]?.status ?? 500) < 400,
  );
  assert.ok(succeeding.length >= 70, `${succeeding.length} routes answer JSON with a schema`);
  assert.deepEqual(
    succeeding.map(keyOf).filter((k) => !fitted.answers.has(k)),
    [],
    "routes whose success was never checked",
  );
  assert.deepEqual(
    API_ROUTES.filter((r) => r.responseType !== "any" && r.auth)
      .map(keyOf)
      .filter((k) => !fitted.errors.has(k)),
    [],
    "keyed routes whose refusals were never checked",
  );
});

test("exec's stream form: its answer is multiplexed frames; a malformed first line is refused", async () => {
  const path = `/v1/envs/${a.env}/exec/stream`;
  const res = await app.request(path, {
    method: "POST",
    headers: { authorization: `Bearer ${keyA}`, "content-type": "application/octet-stream" },
    body: Buffer.from('{"command":["cat"]}\nsome stdin'),
  });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "application/vnd.denv.multiplexed-stream");
  const bytes = Buffer.from(await res.arrayBuffer());
  const frames: [number, string][] = [];
  for (let off = 0; off + 8 <= bytes.length; ) {
    const n = bytes.readUInt32BE(off + 4);
    frames.push([bytes[off] as number, bytes.subarray(off + 8, off + 8 + n).toString()]);
    off += 8 + n;
  }
  assert.deepEqual(frames[0], [1, "hello\n"]);
  assert.equal(frames.at(-1)?.[0], 3);
  assert.equal(JSON.parse(frames.at(-1)?.[1] as string).exit_code, 0);
  for (const [body, why] of [
    ['{"command": ["cat"]', /no newline/],
    ["not json\nstdin", /not the exec request as JSON/],
    ['{"command": ["cat"], "evil": 1}\n', /unrecognized|evil/i],
    [`{"command": ["cat"], "cwd": "${"x".repeat(5 * 1024 * 1024)}"}\n`, /first line, at most/],
  ] as const) {
    const r = await app.request(path, {
      method: "POST",
      headers: { authorization: `Bearer ${keyA}`, "content-type": "application/octet-stream" },
      body,
    });
    assert.equal(r.status, 400, body.slice(0, 40));
    const e = ((await r.json()) as { error: { code: string; message: string } }).error;
    assert.equal(e.code, "invalid_argument");
    assert.match(e.message, why);
  }
});

test("a host that sends past its credit has that stream failed, and the server stays whole", async () => {
  const { STREAM_DATA, STREAM_WINDOW_BYTES, encodeStreamFrame } = await import("@denv/protocol");
  const honest = handlers.get_files;
  handlers.get_files = (p) => {
    // More than the whole window in one frame, with no credit for it: the server must not take it.
    double.sendRaw(encodeStreamFrame(STREAM_DATA, p.tar_stream, Buffer.alloc(STREAM_WINDOW_BYTES + 1, 0x41)));
    return new Promise(() => {}); // and it never answers
  };
  try {
    const res = await call("GET", `/v1/envs/${a.env}/files?path=/work`, { key: keyA });
    // Not waited on for the answer it will never give: the call fails at once, in denv's words.
    assert.equal(res.status, 503, res.text.slice(0, 200));
    assert.equal(res.json().error?.code, "unavailable");
    assert.match(res.text, /broke the stream protocol/);
  } finally {
    handlers.get_files = honest;
  }
  // The host and the server carry on.
  const ok = await call("GET", `/v1/envs/${a.env}/files?path=/work`, { key: keyA });
  assert.equal(ok.status, 200);
});

test("a version reference that names nothing says which noun was meant", async () => {
  const message = (r: { text: string }) =>
    (JSON.parse(r.text) as { error: { message: string } }).error.message;
  const bad = await call("GET", "/v1/versions/ver_nope", { key: keyA });
  assert.equal(bad.status, 404);
  assert.equal(message(bad), "no version ver_nope: a version's id is ver_ and 12 hex digits");
  const none = await call("GET", `/v1/versions/${encodeURIComponent("shop/beta")}`, { key: keyA });
  assert.equal(none.status, 404);
  assert.match(message(none), /^no version or environment shop\/beta: name a version/);
  const diff = await call("GET", `/v1/envs/${a.env}/diff?against=ver_nope`, { key: keyA });
  assert.match(message(diff), /^no version ver_nope/, "diff's against names a version");
});

test("an egress change is checked before it reaches the host: a bad rule is refused naming its place; a good one goes normalised", async () => {
  const calls = double.calls.length;
  const bad = await call("PATCH", `/v1/envs/${a.env}/egress`, {
    key: keyA,
    body: JSON.stringify({ allow: ["pkg.mirror.test", "*"], deny: ["pkg.mіrror.test"] }),
  });
  assert.equal(bad.status, 400);
  const message = (JSON.parse(bad.text) as { error: { message: string } }).error.message;
  assert.match(message, /allow\[1\]: "\*": "\*" alone is every name/);
  assert.match(message, /deny\[0\]: .* is not ASCII/);
  assert.equal(double.calls.length, calls, "nothing reached the host");
  const good = await call("PATCH", `/v1/envs/${a.env}/egress`, {
    key: keyA,
    body: JSON.stringify({ allow: ["PKG.Mirror.Test.", "pkg.mirror.test"], deny: [] }),
  });
  assert.equal(good.status, 200);
  assert.deepEqual(JSON.parse(good.text), { policy: { allow: ["pkg.mirror.test"], deny: [] }, closed: 1 });
  const sent = double.calls.filter((c) => c.method === "set_egress").at(-1);
  assert.deepEqual((sent?.params as { policy?: unknown } | undefined)?.policy, {
    allow: ["pkg.mirror.test"],
    deny: [],
  });
});

test("a host's log lines are checked on arrival: one that is not a log line ends the answer with unavailable", async () => {
  const honest = handlers.service_logs;
  for (const bad of [
    '{"service":"box","stream":"stdin","time":"","line":"x"}',
    "not json",
    `${"x".repeat(2 * 1024 * 1024)}`,
  ]) {
    handlers.service_logs = (p, streams) => {
      streams(p.logs_stream).write(
        `${JSON.stringify({ service: "box", stream: "stdout", time: "", line: "ok" })}\n${bad}`,
      );
      streams(p.logs_stream).end("\n");
      return { lines: 2 };
    };
    try {
      const res = await call("GET", `/v1/envs/${a.env}/logs`, { key: keyA });
      assert.equal(res.status, 200);
      const lines = res.text.split("\n").filter((l) => l.trim());
      assert.equal(JSON.parse(lines[0] as string).line, "ok", "what came before is answered");
      const last = JSON.parse(lines.at(-1) as string) as { error?: { code: string; message: string } };
      assert.equal(last.error?.code, "unavailable", bad.slice(0, 60));
      assert.equal(lines.length, 2, "nothing of the bad line is passed on");
    } finally {
      handlers.service_logs = honest;
    }
  }
});

test("a fan-out reports each fork: four made; asked again, the taken names are refused beside the one made", async () => {
  const res = await call("POST", `/v1/versions/${a.version}/forks`, {
    key: keyA,
    body: JSON.stringify({ count: 4, name_prefix: "wide" }),
  });
  assert.equal(res.status, 200, res.text);
  const r = JSON.parse(res.text) as {
    requested: number;
    created: number;
    failed: number;
    forks: { name: string; ok: boolean; environment?: { name: string; parent_version_id: string } }[];
  };
  assert.deepEqual([r.requested, r.created, r.failed], [4, 4, 0]);
  assert.deepEqual(
    r.forks.map((f) => f.name),
    ["wide-1", "wide-2", "wide-3", "wide-4"],
  );
  assert.ok(r.forks.every((f) => f.environment?.parent_version_id === a.version));
  // Again with the same names: every one is refused on its own, with its code, none hidden.
  const again = JSON.parse(
    (
      await call("POST", `/v1/versions/${a.version}/forks`, {
        key: keyA,
        body: JSON.stringify({ count: 5, name_prefix: "wide" }),
      })
    ).text,
  ) as { created: number; failed: number; forks: { name: string; ok: boolean; error?: { code: string } }[] };
  assert.equal(again.created, 1, JSON.stringify(again.forks));
  assert.equal(again.failed, 4);
  assert.equal(again.forks.find((f) => f.name === "wide-5")?.ok, true);
  assert.ok(again.forks.filter((f) => !f.ok).every((f) => f.error?.code === "conflict"));
  const over = await call("POST", `/v1/versions/${a.version}/forks`, { key: keyA, body: '{"count": 65}' });
  assert.equal(over.status, 400);
});

test("E2B's routes: no key and a bad key 401, another team's key 404 and an empty list, envd without the sandbox's token 401", async () => {
  const e2b = (
    method: string,
    path: string,
    key: string | null,
    body?: unknown,
    headers: Record<string, string> = {},
  ) =>
    call(method, `/e2b${path}`, {
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      headers: { ...(key ? { "x-api-key": key } : {}), ...headers },
    });
  const made = await e2b("POST", "/v2/sandboxes", keyA, { templateID: a.version, metadata: { run: "m1" } });
  assert.equal(made.status, 201, made.text);
  const sb = JSON.parse(made.text) as { sandboxID: string; envdAccessToken: string; envdVersion: string };
  assert.match(sb.sandboxID, /^[a-z0-9]+$/);
  assert.ok(sb.envdAccessToken.length > 20);
  const id = sb.sandboxID;
  const control: [string, string, unknown?][] = [
    ["POST", "/v2/sandboxes", { templateID: a.version }],
    ["GET", "/v2/sandboxes"],
    ["GET", `/sandboxes/${id}`],
    ["DELETE", `/sandboxes/${id}`],
    ["POST", `/sandboxes/${id}/timeout`, { timeout: 60 }],
    ["POST", `/v2/sandboxes/${id}/connect`, { timeout: 60 }],
    ["POST", `/sandboxes/${id}/fork`, { count: 1 }],
    ["POST", `/sandboxes/${id}/snapshots`, { name: "s1" }],
    ["POST", `/sandboxes/${id}/pause`, {}],
    ["PUT", `/sandboxes/${id}/network`, { allowOut: ["pkg.mirror.test"] }],
    ["POST", `/sandboxes/${id}/resume`, {}],
    ["GET", "/snapshots"],
  ];
  for (const [method, path, body] of control) {
    for (const key of [null, "dk_not_a_key"]) {
      const r = await e2b(method, path, key, body);
      assert.equal(r.status, 401, `${method} ${path} with ${key ?? "no key"}: ${r.text}`);
    }
    if (path === "/v2/sandboxes" || path === "/snapshots") continue;
    const r = await e2b(method, path, keyB, body);
    assert.equal(r.status, 404, `${method} ${path} with another team's key: ${r.text}`);
  }
  const theirs = await e2b("GET", "/v2/sandboxes", keyB);
  assert.deepEqual(JSON.parse(theirs.text), []);
  // A snapshot's name means a template to its own team only.
  const snap = await e2b("POST", `/sandboxes/${id}/snapshots`, keyA, { name: "ours" });
  assert.equal(snap.status, 201, snap.text);
  assert.deepEqual(JSON.parse((await e2b("GET", "/snapshots", keyB)).text), []);
  assert.equal((await e2b("POST", "/v2/sandboxes", keyB, { templateID: "ours" })).status, 404);
  for (const bad of ["../x", "a/b", "", 7])
    assert.equal(
      (await e2b("POST", `/sandboxes/${id}/snapshots`, keyA, { name: bad })).status,
      400,
      String(bad),
    );
  // A key in E2B's form (what its SDKs check for) is a key like any other, of its maker's team.
  const minted = JSON.parse(
    (await call("POST", "/v1/keys", { key: keyA, body: JSON.stringify({ name: "sdk", format: "e2b" }) }))
      .text,
  ) as { key: string; role: string };
  assert.match(minted.key, /^e2b_[0-9a-f]{40}$/);
  assert.equal(minted.role, "admin");
  const byMinted = JSON.parse((await e2b("GET", "/v2/sandboxes", minted.key)).text) as {
    sandboxID: string;
  }[];
  assert.ok(byMinted.some((x) => x.sandboxID === id));
  const bMinted = JSON.parse(
    (await call("POST", "/v1/keys", { key: keyB, body: JSON.stringify({ name: "sdk", format: "e2b" }) }))
      .text,
  ) as { key: string; role: string };
  assert.deepEqual(JSON.parse((await e2b("GET", "/v2/sandboxes", bMinted.key)).text), []);
  const ours = JSON.parse((await e2b("GET", "/v2/sandboxes?metadata=run%3Dm1", keyA)).text) as {
    sandboxID: string;
  }[];
  assert.deepEqual(
    ours.map((s) => s.sandboxID),
    [id],
  );
  // envd's calls: the sandbox's own token or nothing; a token is not a key, nor a key a token.
  const envd = (token: string | null, sandbox = id) =>
    call("POST", "/e2b/process.Process/List", {
      body: "{}",
      headers: {
        "e2b-sandbox-id": sandbox,
        "e2b-sandbox-port": "49983",
        ...(token ? { "x-access-token": token } : {}),
      },
    });
  for (const token of [null, "ea_forged", keyA, `${sb.envdAccessToken}x`]) {
    const r = await envd(token);
    assert.equal(r.status, 401, `token ${token}: ${r.text}`);
    assert.equal((JSON.parse(r.text) as { code: string }).code, "unauthenticated");
  }
  assert.equal((await envd(sb.envdAccessToken, "../../v1")).status, 401);
  const listed = await envd(sb.envdAccessToken);
  assert.equal(listed.status, 200, listed.text);
  assert.deepEqual(JSON.parse(listed.text), { processes: [] });
  // A server stream whose envelope claims 4 GiB: refused from its header, nothing read past it.
  const huge = await call("POST", "/e2b/process.Process/Start", {
    body: Buffer.from([0, 0xff, 0xff, 0xff, 0xff]),
    type: "application/connect+json",
    headers: { "e2b-sandbox-id": id, "x-access-token": sb.envdAccessToken },
  });
  // Connect's way for a stream: HTTP 200 and an end-of-stream envelope (flag 2) with the error.
  assert.equal(huge.status, 200, huge.text);
  const end = Buffer.from(huge.text, "latin1");
  assert.equal(end[0], 2);
  assert.equal(
    (JSON.parse(end.subarray(5).toString()) as { error: { code: string } }).error.code,
    "invalid_argument",
  );
  // Killed by its own team: gone for its token too.
  assert.equal((await e2b("DELETE", `/sandboxes/${id}`, keyA)).status, 204);
  assert.equal((await envd(sb.envdAccessToken)).status, 401);
});

/** An E2B call's outcome as one code: a control route's status, an envd call's Connect code. */
async function e2bOutcome(
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: Buffer | string,
): Promise<{ status: number; code: string; text: string }> {
  const res = await app.request(`/e2b${path}`, {
    method,
    headers: { ...(body !== undefined ? { "content-type": "application/json" } : {}), ...headers },
    body,
  });
  // A server stream answers 200: a refusal is its one end envelope, a call let in sends a message
  // first (a watch sends until it is cancelled, so the first envelope is all that is read).
  if (res.headers.get("content-type")?.startsWith("application/connect+json")) {
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    let got = Buffer.alloc(0);
    while (got.length < 5 || got.length < 5 + got.readUInt32BE(1)) {
      const { value, done } = await reader.read();
      if (done) break;
      got = Buffer.concat([got, value]);
    }
    await reader.cancel();
    const text = got.toString("latin1");
    if (got.length < 5) return { status: res.status, code: "empty", text };
    const first = JSON.parse(got.subarray(5, 5 + got.readUInt32BE(1)).toString()) as {
      error?: { code: string };
    };
    const ended = ((got[0] as number) & 2) !== 0;
    return { status: res.status, code: ended ? (first.error?.code ?? "ok") : "ok", text };
  }
  const bytes = Buffer.from(await res.arrayBuffer());
  const text = bytes.toString("latin1");
  let code = String(res.status);
  try {
    const j = JSON.parse(bytes.toString()) as { code?: unknown };
    if (typeof j.code === "string") code = j.code;
    // envd's /files answers E2B's {code: status}: the two that matter here, in Connect's words.
    else if (j.code === 401) code = "unauthenticated";
    else if (j.code === 403) code = "permission_denied";
  } catch {
    // Not JSON: the status says it.
  }
  return { status: res.status, code, text };
}

/** A request for each envd operation, as the SDK makes it (a stream's one message enveloped). */
function envdRequest(op: string): { method: string; path: string; body?: Buffer | string; type?: string } {
  const [method, path] = op.split(" ") as [string, string];
  const envelope = (m: unknown) => {
    const json = Buffer.from(JSON.stringify(m));
    const head = Buffer.alloc(5);
    head.writeUInt32BE(json.length, 1);
    return Buffer.concat([head, json]);
  };
  const messages: Record<string, unknown> = {
    "/process.Process/Start": { process: { cmd: "true" } },
    "/process.Process/Connect": { process: { pid: 1 } },
    "/filesystem.Filesystem/WatchDir": { path: "/work" },
  };
  const bodies: Record<string, unknown> = {
    "/process.Process/SendInput": { process: { pid: 1 }, input: { stdin: "" } },
    "/process.Process/CloseStdin": { process: { pid: 1 } },
    "/process.Process/SendSignal": { process: { pid: 1 }, signal: "SIGNAL_SIGKILL" },
    "/filesystem.Filesystem/Stat": { path: "/work" },
    "/filesystem.Filesystem/ListDir": { path: "/work" },
    "/filesystem.Filesystem/MakeDir": { path: "/work/new" },
    "/filesystem.Filesystem/Move": { source: "/work/a", destination: "/work/b" },
    "/filesystem.Filesystem/Remove": { path: "/work/old" },
    "/process.Process/List": {},
  };
  if (path === "/files")
    return method === "GET"
      ? { method, path: "/files?path=/work/a.txt" }
      : { method, path: "/files?path=/work/up.txt", body: "bytes", type: "application/octet-stream" };
  if (path in messages)
    return { method, path, body: envelope(messages[path]), type: "application/connect+json" };
  return { method, path, body: JSON.stringify(bodies[path] ?? {}) };
}

test("E2B's create with network rules is refused, never made open on allow_internet_access", async () => {
  const r = await call("POST", "/e2b/v2/sandboxes", {
    body: JSON.stringify({
      templateID: "127.0.0.1:5000/denv/opsbox:bookworm",
      allow_internet_access: true,
      network: { allowOut: ["pkg.mirror.test"], denyOut: ["0.0.0.0/0"] },
    }),
    headers: { "x-api-key": keyA },
  });
  assert.equal(r.status, 400, r.text);
  assert.match(r.text, /network rules on create are not served by denv/);
});

test("E2B's and envd's routes by role: read-only keys read and are refused every change, members do both, another team's key reaches nothing", async () => {
  const make = async (key: string) => {
    const r = await e2bOutcome(
      "POST",
      "/v2/sandboxes",
      { "x-api-key": key },
      JSON.stringify({ templateID: a.version }),
    );
    assert.equal(r.status, 201, r.text);
    return JSON.parse(r.text) as { sandboxID: string; envdAccessToken: string; trafficAccessToken?: string };
  };
  const bodyOfControl: Record<string, unknown> = {
    "POST /v2/sandboxes": { templateID: a.version },
    "POST /sandboxes": { templateID: a.version },
    "POST /sandboxes/:id/timeout": { timeout: 60 },
    "POST /sandboxes/:id/fork": { count: 1 },
    "POST /sandboxes/:id/snapshots": { name: "by-role" },
    "PUT /sandboxes/:id/network": { allowOut: ["pkg.mirror.test"], denyOut: ["0.0.0.0/0"] },
  };
  const controlCall = (op: string, key: string, id: string) => {
    const [method, path] = op.split(" ") as [string, string];
    const body = JSON.stringify(bodyOfControl[op] ?? {});
    return e2bOutcome(
      method,
      path.replace(":id", id),
      { "x-api-key": key },
      method === "GET" || method === "DELETE" ? undefined : body,
    );
  };
  const ops = Object.entries(E2B_CONTROL_OPERATIONS);
  assert.ok(ops.length >= 14, "every control route is in the table");
  for (const [op, needs] of ops) {
    const sb = await make(keyA);
    // Read-only: a read answers as for anyone of the team; a change is refused before it is done.
    const ro = await controlCall(op, a.readOnlyKey, sb.sandboxID);
    if (needs === "change") {
      assert.equal(ro.status, 403, `${op} as read-only: ${ro.text}`);
      assert.match(ro.text, /read-only/);
    } else assert.ok(ro.status < 300, `${op} as read-only: ${ro.status} ${ro.text}`);
    // Another team's key: the sandbox is not there for it (the lists and creates are its own).
    const b = await controlCall(op, keyB, sb.sandboxID);
    if (op.includes(":id")) assert.equal(b.status, 404, `${op} as team B: ${b.text}`);
    else assert.ok(!b.text.includes(sb.sandboxID), `${op} as team B names team A's sandbox`);
    // A member: the change is made.
    const m = await controlCall(op, a.memberKey, sb.sandboxID);
    assert.ok(m.status < 300, `${op} as a member: ${m.status} ${m.text}`);
  }

  // The tokens each key is handed act as that key: a read-only key's token reads, never more.
  const sb = await make(keyA);
  const asRo = JSON.parse((await controlCall("GET /sandboxes/:id", a.readOnlyKey, sb.sandboxID)).text) as {
    envdAccessToken: string;
    trafficAccessToken?: string;
  };
  const asMember = JSON.parse((await controlCall("GET /sandboxes/:id", a.memberKey, sb.sandboxID)).text) as {
    envdAccessToken: string;
  };
  assert.notEqual(asRo.envdAccessToken, sb.envdAccessToken, "each key is handed a token of its own");
  assert.match(asRo.trafficAccessToken ?? "", /^dir_/, "a read-only key's traffic token reads only");
  const keyBRow = await store
    .selectFrom("api_keys")
    .select(["id"])
    .where("prefix", "=", keyB.slice(0, 8))
    .executeTakeFirstOrThrow();
  const row = await store
    .selectFrom("e2b_sandboxes")
    .selectAll()
    .where("environment_id", "=", `env_${sb.sandboxID}`)
    .executeTakeFirstOrThrow();
  const secrets = SecretBox.open(join(dir, "store"));
  const teamBToken = `ea_${keyBRow.id.slice(4)}_${secrets.derive(`e2b-envd:${row.environment_id}:${row.token_salt}:${keyBRow.id}`)}`;
  const envdOps = Object.entries(ENVD_OPERATIONS);
  assert.ok(envdOps.length >= 14, "every envd route is in the table");
  for (const [op, needs] of envdOps) {
    const req = envdRequest(op);
    const headers = (token: string, sandbox = sb.sandboxID) => ({
      "e2b-sandbox-id": sandbox,
      "x-access-token": token,
      ...(req.type ? { "content-type": req.type } : {}),
    });
    const ro = await e2bOutcome(req.method, req.path, headers(asRo.envdAccessToken), req.body);
    if (needs === "change")
      assert.equal(ro.code, "permission_denied", `${op} with a read-only key's token: ${ro.text}`);
    else
      assert.ok(!["permission_denied", "unauthenticated"].includes(ro.code), `${op} read-only: ${ro.text}`);
    const m = await e2bOutcome(req.method, req.path, headers(asMember.envdAccessToken), req.body);
    assert.ok(!["permission_denied", "unauthenticated"].includes(m.code), `${op} as a member: ${m.text}`);
    // A token made, by the server's own key, for team B's key and this very sandbox: the key is
    // not of the sandbox's team, so it opens nothing (a team B token for its own sandbox is weaker).
    const b = await e2bOutcome(req.method, req.path, headers(teamBToken), req.body);
    assert.equal(b.code, "unauthenticated", `${op} with a team B key's token: ${b.text}`);
  }
  // A signed URL made from the read-only key's token reads; one to write is refused.
  const sign = (path: string, operation: string, user: string, token: string) =>
    `v1_${createHash("sha256").update(`${path}:${operation}:${user}:${token}`).digest("base64").replace(/=+$/, "")}`;
  const put = await e2bOutcome(
    "POST",
    `/files?path=/work/x&username=&signature=${encodeURIComponent(sign("/work/x", "write", "", asRo.envdAccessToken))}`,
    { "e2b-sandbox-id": sb.sandboxID, "content-type": "application/octet-stream" },
    "x",
  );
  assert.equal(put.status, 403, put.text);
  // A key revoked: the tokens made for it end with it.
  await store.deleteFrom("api_keys").where("prefix", "=", a.memberKey.slice(0, 8)).execute();
  const gone = await e2bOutcome(
    "POST",
    "/process.Process/List",
    {
      "e2b-sandbox-id": sb.sandboxID,
      "x-access-token": asMember.envdAccessToken,
    },
    "{}",
  );
  assert.equal(gone.code, "unauthenticated", gone.text);
});
