/**
 * People, sessions and device login, in process against a real SQLite store: a session acts in its
 * team like a key, its changes need the CSRF token, a read-only member only reads, a device login
 * gives exactly one key of the approving person's team, and hostile input fails safely.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { ComposeValidator } from "@denv/spec";
import { elapse } from "../../../../test/harness/wait-for.ts";
import { createApp } from "../app.ts";
import { SecretBox } from "../clouds/secret-box.ts";
import { Deployer } from "../deployments/deployer.ts";
import { FetchPolicy } from "../fetch-policy.ts";
import { PortsOrigin } from "../ports-origin.ts";
import { openStore, type Store } from "../store/open-store.ts";
import { DenvdHosts } from "../targets/denvd/denvd-hosts.ts";

let dir: string;
let store: Store;
let hub: DenvdHosts;
let validator: ComposeValidator;
let app: ReturnType<typeof createApp>;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "denv-people-"));
  store = await openStore(join(dir, "store"));
  const secrets = SecretBox.open(join(dir, "store"));
  hub = new DenvdHosts(store, { waitForHostMs: 100 });
  validator = new ComposeValidator({ workers: 1 });
  const fetchPolicy = new FetchPolicy([]);
  const deployer = new Deployer({
    store,
    stacks: hub.stacks,
    secrets,
    validator,
    fetchPolicy,
    joinWaitMs: 100,
  });
  app = createApp({
    portsOrigin: new PortsOrigin("http://localhost:1"),
    store,
    stacks: hub.stacks,
    deployer,
    secrets,
    fetchPolicy,
    log: () => {},
  });
});

after(async () => {
  hub?.close();
  await validator?.close();
  await store?.destroy();
  rmSync(dir, { recursive: true, force: true });
});

interface Res {
  status: number;
  data: any;
  setCookie: string | null;
}

/** A browser of one: keeps the session cookie it is given and sends it back. */
class Browser {
  cookie: string | null = null;
  csrf: string | null = null;
  async call(
    method: string,
    path: string,
    body?: unknown,
    headers: Record<string, string> = {},
  ): Promise<Res> {
    const h: Record<string, string> = { ...headers };
    if (this.cookie) h.cookie = this.cookie;
    if (body !== undefined) h["content-type"] = "application/json";
    const res = await app.request(`http://denv.test${path}`, {
      method,
      headers: h,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const setCookie = res.headers.get("set-cookie");
    if (setCookie) this.cookie = setCookie.split(";")[0] ?? null;
    const text = await res.text();
    return { status: res.status, data: text ? JSON.parse(text) : null, setCookie };
  }
  /** A change, with the session's CSRF token as the console sends it. */
  change(method: string, path: string, body?: unknown) {
    return this.call(method, path, body, this.csrf ? { "x-csrf-token": this.csrf } : {});
  }
  async signUp(email: string, extra: Record<string, unknown> = {}) {
    const r = await this.call("POST", "/v1/auth/signup", {
      email,
      password: "correct horse battery",
      ...extra,
    });
    assert.equal(r.status, 201, JSON.stringify(r.data));
    this.csrf = r.data.csrf_token;
    return r;
  }
}

async function withKey(key: string, method: string, path: string, body?: unknown): Promise<Res> {
  const res = await app.request(`http://denv.test${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, data: text ? JSON.parse(text) : null, setCookie: null };
}

test("sign up: a team of one's own, a session cookie that is HttpOnly, Secure and SameSite=Strict", async () => {
  const b = new Browser();
  const r = await b.signUp("Ada@Example.com", { team_name: "ada's lab" });
  assert.match(r.setCookie ?? "", /^__Host-denv_session=dss_[\w-]+; .*HttpOnly/);
  assert.match(r.setCookie ?? "", /Secure/);
  assert.match(r.setCookie ?? "", /SameSite=Strict/);
  assert.equal(r.data.user.email, "ada@example.com");
  assert.equal(r.data.team.name, "ada's lab");
  assert.equal(r.data.role, "admin");
  // The cookie reads the API as a key would, scoped to the team.
  const projects = await b.call("GET", "/v1/projects");
  assert.equal(projects.status, 200);
  assert.deepEqual(projects.data.projects, []);
  // The same email again is refused, in any case.
  const again = await new Browser().call("POST", "/v1/auth/signup", {
    email: "ADA@example.com",
    password: "another password",
  });
  assert.equal(again.status, 409);
  // Passwords are stored as scrypt, not as given.
  const row = await store.selectFrom("users").select("password_hash").executeTakeFirstOrThrow();
  assert.match(row.password_hash, /^scrypt\$/);
  assert.ok(!row.password_hash.includes("correct horse"));
});

test("a change without the CSRF token is refused, with it done; reads need none", async () => {
  const b = new Browser();
  await b.signUp("grace@example.com");
  const body = { name: "q", kind: "agent", source: "./q" };
  const forged = await b.call("POST", "/v1/projects", body);
  assert.equal(forged.status, 403);
  assert.match(forged.data.error.message, /CSRF/);
  const wrong = await b.call("POST", "/v1/projects", body, { "x-csrf-token": "dcs_guess" });
  assert.equal(wrong.status, 403);
  assert.equal((await b.call("GET", "/v1/projects")).data.projects.length, 0, "nothing was made");
  const done = await b.change("POST", "/v1/projects", body);
  assert.equal(done.status, 201, JSON.stringify(done.data));
  // The session answer hands the page its token again after a reload.
  assert.equal((await b.call("GET", "/v1/auth/session")).data.csrf_token, b.csrf);
});

test("sign in: a wrong password and an unknown email get the same answer; sign out ends the cookie", async () => {
  const b = new Browser();
  await b.signUp("alan@example.com");
  const wrong = await new Browser().call("POST", "/v1/auth/login", {
    email: "alan@example.com",
    password: "not the password",
  });
  const unknown = await new Browser().call("POST", "/v1/auth/login", {
    email: "nobody@example.com",
    password: "not the password",
  });
  assert.equal(wrong.status, 401);
  assert.deepEqual(unknown.data, wrong.data);
  const c = new Browser();
  const ok = await c.call("POST", "/v1/auth/login", {
    email: "ALAN@example.com",
    password: "correct horse battery",
  });
  assert.equal(ok.status, 200);
  c.csrf = ok.data.csrf_token;
  const cookie = c.cookie;
  assert.equal((await c.change("POST", "/v1/auth/logout")).status, 200);
  // The old cookie, replayed, is worth nothing now.
  c.cookie = cookie;
  assert.equal((await c.call("GET", "/v1/projects")).status, 401);
});

test("a device login: pending until approved in the console, then exactly one key of the approver's team", async () => {
  const person = new Browser();
  const signed = await person.signUp("linus@example.com", { team_name: "kernel" });
  const code = await new Browser().call("POST", "/v1/device/code", { client_name: "laptop-7" });
  assert.equal(code.status, 201);
  assert.match(code.data.user_code, /^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$/);
  assert.equal(code.data.verification_uri, "http://denv.test/device");
  const poll = () => new Browser().call("POST", "/v1/device/token", { device_code: code.data.device_code });
  assert.equal((await poll()).data.status, "pending");
  // Polling faster than the interval is told to slow down.
  assert.equal((await poll()).data.status, "slow_down");
  // A key cannot answer for a person; the person looks it up (case and dash do not matter).
  const lookup = await person.call("GET", `/v1/device/${code.data.user_code.toLowerCase().replace("-", "")}`);
  assert.equal(lookup.status, 200, JSON.stringify(lookup.data));
  assert.equal(lookup.data.client_name, "laptop-7");
  const noCsrf = await person.call("POST", `/v1/device/${code.data.user_code}`, { approve: true });
  assert.equal(noCsrf.status, 403, "an approval is a change: it needs the CSRF token");
  assert.equal(
    (await person.change("POST", `/v1/device/${code.data.user_code}`, { approve: true })).status,
    200,
  );
  await elapse(1100, "a device polls no sooner than its interval (RFC 8628: 1 s), or is told to slow down");
  const got = await poll();
  assert.equal(got.data.status, "approved", JSON.stringify(got.data));
  assert.equal(got.data.team_id, signed.data.team.id);
  assert.equal(got.data.role, "admin");
  // Once only: the code is spent.
  assert.equal((await poll()).status, 404);
  // The key works in the person's team, is listed as theirs and named after the machine.
  const key = got.data.api_key as string;
  assert.equal((await withKey(key, "GET", "/v1/projects")).status, 200);
  const keys = (await person.call("GET", "/v1/keys")).data.keys as any[];
  const mine = keys.find((k) => k.id === got.data.key_id);
  assert.equal(mine?.name, "laptop-7");
  assert.equal(mine?.user_email, "linus@example.com");
  assert.ok(!JSON.stringify(keys).includes(key), "a key's secret is never listed");
  // denv logout: the key revokes itself.
  assert.equal((await withKey(key, "DELETE", "/v1/keys/current")).status, 200);
  assert.equal((await withKey(key, "GET", "/v1/projects")).status, 401);
});

test("a denied device login gets no key; a used or unknown user code is not found", async () => {
  const person = new Browser();
  await person.signUp("barbara@example.com");
  const code = await new Browser().call("POST", "/v1/device/code", {});
  assert.equal(
    (await person.change("POST", `/v1/device/${code.data.user_code}`, { approve: false })).status,
    200,
  );
  const poll = await new Browser().call("POST", "/v1/device/token", { device_code: code.data.device_code });
  assert.equal(poll.data.status, "denied");
  assert.equal(poll.data.api_key, undefined);
  assert.equal(
    (await person.change("POST", `/v1/device/${code.data.user_code}`, { approve: true })).status,
    404,
  );
  for (const bad of ["AAAA-AAAA", "BCDF", "'; drop table users; --", "%00", "B".repeat(5000)])
    assert.equal((await person.call("GET", `/v1/device/${encodeURIComponent(bad)}`)).status, 404, bad);
});

test("a read-only member reads but cannot change; another team's objects stay unknown to a session", async () => {
  const admin = new Browser();
  const a = await admin.signUp("owner@example.com", { team_name: "owners" });
  const inv = await admin.change("POST", "/v1/invitations", {
    email: "reader@example.com",
    role: "read-only",
  });
  assert.equal(inv.status, 201, JSON.stringify(inv.data));
  // An invitation is for its email only.
  const stranger = await new Browser().call("POST", "/v1/auth/signup", {
    email: "stranger@example.com",
    password: "correct horse battery",
    invitation: inv.data.token,
  });
  assert.equal(stranger.status, 403);
  const reader = new Browser();
  const joined = await reader.signUp("reader@example.com", { invitation: inv.data.token });
  assert.equal(joined.data.team.id, a.data.team.id);
  assert.equal(joined.data.role, "read-only");
  assert.equal((await reader.call("GET", "/v1/projects")).status, 200);
  const refused = await reader.change("POST", "/v1/projects", { name: "r", kind: "agent", source: "./r" });
  assert.equal(refused.status, 403);
  assert.match(refused.data.error.message, /read-only/);
  // What changes nothing of the team's stays open to it: a device login (its key read-only too).
  const code = await new Browser().call("POST", "/v1/device/code", { client_name: "reader-laptop" });
  assert.equal(
    (await reader.change("POST", `/v1/device/${code.data.user_code}`, { approve: true })).status,
    200,
  );
  await elapse(1100, "a device polls no sooner than its interval (RFC 8628: 1 s), or is told to slow down");
  const got = await new Browser().call("POST", "/v1/device/token", { device_code: code.data.device_code });
  assert.equal(got.data.role, "read-only");
  assert.equal(
    (await withKey(got.data.api_key, "POST", "/v1/projects", { name: "k", kind: "agent", source: "./k" }))
      .status,
    403,
  );
  // The invitation is spent.
  const twice = await new Browser().call("POST", "/v1/auth/signup", {
    email: "reader@example.com",
    password: "correct horse battery",
    invitation: inv.data.token,
  });
  assert.equal(twice.status, 404);
  // Another team's session sees none of this team's members or keys.
  const other = new Browser();
  await other.signUp("other@example.com");
  const members = (await other.call("GET", "/v1/members")).data.members as any[];
  assert.deepEqual(
    members.map((m) => m.email),
    ["other@example.com"],
  );
  // Its admin cannot reach this team's member: as unknown as any id.
  assert.equal((await other.change("DELETE", `/v1/members/${joined.data.user.id}`)).status, 404);
  // A read-only member signs out like anyone.
  assert.equal((await reader.change("POST", "/v1/auth/logout")).status, 200);
  assert.equal((await reader.call("GET", "/v1/projects")).status, 401);
  // The last admin stays an admin.
  const last = await admin.change("PUT", `/v1/members/${a.data.user.id}`, { role: "member" });
  assert.equal(last.status, 409);
});

test("a sign-in link (an invitation with no email) is anyone's once, within a day; never twice, even at once", async () => {
  const admin = new Browser();
  const a = await admin.signUp("linker@example.com", { team_name: "linkers" });
  const link = await admin.change("POST", "/v1/invitations", { role: "admin" });
  assert.equal(link.status, 201, JSON.stringify(link.data));
  assert.equal(link.data.email, "");
  assert.match(link.data.url, /\/#\/join\?invitation=dinv_/);
  // A day to open it, where an emailed invitation has seven.
  const ttlMs = Date.parse(link.data.expires_at) - Date.parse(link.data.created_at);
  assert.ok(ttlMs > 23 * 3600_000 && ttlMs <= 24 * 3600_000 + 1000, `${ttlMs} ms`);
  // Two people opening it at once: exactly one of them joins, the other is told it is gone.
  const [first, second] = await Promise.all(
    ["first@example.com", "second@example.com"].map((email) =>
      new Browser().call("POST", "/v1/auth/signup", {
        email,
        password: "correct horse battery",
        invitation: link.data.token,
      }),
    ),
  );
  const statuses = [first?.status, second?.status].sort();
  assert.deepEqual(statuses, [201, 404], JSON.stringify([first?.data, second?.data]));
  const joined = (first?.status === 201 ? first : second) as Res;
  assert.equal(joined.data.team.id, a.data.team.id);
  assert.equal(joined.data.role, "admin");
  // The one who was refused has no account: nothing was made for them.
  const loser = first?.status === 201 ? "second@example.com" : "first@example.com";
  const login = await new Browser().call("POST", "/v1/auth/login", {
    email: loser,
    password: "correct horse battery",
  });
  assert.equal(login.status, 401);
  // An account that cannot be made (its email is taken) gives the link back for someone else.
  const again = await admin.change("POST", "/v1/invitations", { role: "member" });
  const taken = await new Browser().call("POST", "/v1/auth/signup", {
    email: "linker@example.com",
    password: "correct horse battery",
    invitation: again.data.token,
  });
  assert.equal(taken.status, 409, JSON.stringify(taken.data));
  const other = new Browser();
  await other.signUp("other-team@example.com");
  const accepted = await other.change("POST", `/v1/invitations/${again.data.token}/accept`);
  assert.equal(accepted.status, 200, JSON.stringify(accepted.data));
  assert.equal(accepted.data.team.id, a.data.team.id);
  assert.equal(accepted.data.role, "member");
  // Only an admin makes one.
  const member = new Browser();
  member.cookie = other.cookie;
  member.csrf = accepted.data.csrf_token;
  const refused = await member.change("POST", "/v1/invitations", { role: "admin" });
  assert.equal(refused.status, 403, JSON.stringify(refused.data));
  // The team's list says which were links.
  const list = (await admin.call("GET", "/v1/invitations")).data.invitations as any[];
  assert.deepEqual(
    list.filter((i) => i.email === "").map((i) => Boolean(i.accepted_at)),
    [true, true],
  );
});

test("hostile sign-up input is refused saying where, and nothing is stored", async () => {
  const before = (await store.selectFrom("users").select("id").execute()).length;
  for (const body of [
    { email: "not an email", password: "correct horse battery" },
    { email: "x@example.com", password: "short" },
    { email: "x@example.com", password: "p".repeat(10_000) },
    { email: `${"a".repeat(300)}@example.com`, password: "correct horse battery" },
    { email: "x@example.com", password: "correct horse battery", admin: true },
  ]) {
    const r = await new Browser().call("POST", "/v1/auth/signup", body);
    assert.equal(r.status, 400, JSON.stringify(body).slice(0, 80));
    assert.equal(r.data.error.code, "invalid_argument");
  }
  assert.equal((await store.selectFrom("users").select("id").execute()).length, before);
});
