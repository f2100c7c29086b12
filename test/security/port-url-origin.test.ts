/**
 * Issue 33, attack 1: a page served from a sandbox, opened through its port URL by a person signed
 * in to the console, tries to take over their account — read the console's session and CSRF token,
 * approve a device login the attacker started, reach the window that opened it. Port URLs live on
 * an origin of their own (another site than the console's), so every step must come back empty: the
 * same script, run on the console's own origin, reads the session (the control that shows what the
 * attack would get). Real Chromium, real server, denvd and engine.
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { after, before, test } from "node:test";
import { type Browser, chromium, type Page } from "playwright-core";
import { type Lab, openLab } from "../harness/lab.ts";
import { waitFor } from "../harness/wait-for.ts";

const CHROMIUM = process.env.DENV_CHROMIUM ?? "/usr/bin/chromium";
let lab: Lab;
let browser: Browser;
let page: Page;

before(async () => {
  assert.ok(existsSync(CHROMIUM), `no browser at ${CHROMIUM}: scripts/ensure-chromium.sh installs Debian's`);
  lab = await openLab();
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
  page = await (await browser.newContext()).newPage();
});

after(async () => {
  await browser?.close();
  if (lab)
    for (const e of (await lab.api("GET", "/v1/envs")).data.environments ?? [])
      await lab.api("DELETE", `/v1/envs/${e.id}`);
  await lab?.close();
});

/** What the hostile page does; it reports each attempt in `document.body.dataset.out`. */
function attackPage(consoleOrigin: string, userCode: string): string {
  return `<!doctype html><title>loading</title><script>
(async () => {
  const out = {};
  const attempt = async (name, f) => {
    try { out[name] = await f(); } catch (e) { out[name] = "blocked: " + e.name; }
  };
  const read = async (r) => r.status + " " + (await r.text()).slice(0, 300);
  await attempt("session_here", async () => read(await fetch("/v1/auth/session", { credentials: "include" })));
  await attempt("session_console", async () =>
    read(await fetch(${JSON.stringify(consoleOrigin)} + "/v1/auth/session", { credentials: "include" })));
  await attempt("approve_blind", async () => {
    const r = await fetch(${JSON.stringify(consoleOrigin)} + "/v1/device/${userCode}", {
      method: "POST", mode: "no-cors", credentials: "include",
      headers: { "content-type": "text/plain" }, body: JSON.stringify({ approve: true }),
    });
    return "sent " + r.type;
  });
  await attempt("approve_cors", async () =>
    read(await fetch(${JSON.stringify(consoleOrigin)} + "/v1/device/${userCode}", {
      method: "POST", credentials: "include",
      headers: { "content-type": "application/json" }, body: JSON.stringify({ approve: true }),
    })));
  await attempt("cookies", async () => document.cookie);
  document.body.dataset.out = JSON.stringify(out);
  document.title = "done";
})();
</script>`;
}

test("a sandbox's page opened through its port URL reads nothing of the console and makes no key", async () => {
  // The victim: a person signed in to the console, in a team of their own.
  await page.goto(lab.server.url);
  await page.waitForURL(/#\/login/);
  await page.getByRole("link", { name: "Create an account" }).click();
  await page.getByLabel("Email").fill("victim@example.com");
  await page.getByLabel("Password").fill("correct horse battery");
  await page.getByLabel("Team name").fill("victims");
  await page.getByRole("button", { name: "Create account" }).click();
  await page.getByRole("heading", { name: "Environments" }).waitFor();
  // Control: on the console's origin, a script reads the session and its CSRF token.
  const control = await page.evaluate(async () => {
    const r = await fetch("/v1/auth/session", { credentials: "include" });
    return { status: r.status, body: await r.text() };
  });
  assert.equal(control.status, 200);
  assert.match(control.body, /csrf_token/);
  const victimTeam = JSON.parse(control.body).team.id as string;

  // The attacker starts a device login and serves the page from a sandbox.
  const device = await fetch(`${lab.server.url}/v1/device/code`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ client_name: "attacker" }),
  });
  const code = (await device.json()) as { device_code: string; user_code: string };
  // The sandbox's own program serves its files; the agent writes the page.
  const sb = await lab.api("POST", "/v1/sandboxes", {
    image: "127.0.0.1:5000/denv/openenv-echo:0.1",
    cmd: [
      "sh",
      "-c",
      "mkdir -p /tmp/www && exec python3 -m http.server 9000 --bind 127.0.0.1 --directory /tmp/www",
    ],
  });
  assert.equal(sb.status, 201, JSON.stringify(sb.data));
  const html = attackPage(new URL(lab.server.url).origin, code.user_code);
  const served = await lab.api("POST", `/v1/envs/${sb.data.id}/exec`, {
    command: ["sh", "-c", "mkdir -p /tmp/www && cat > /tmp/www/index.html"],
    stdin: Buffer.from(html).toString("base64"),
  });
  assert.equal(served.data.exit_code, 0, JSON.stringify(served.data));
  const minted = await lab.api("POST", `/v1/envs/${sb.data.id}/ports/9000`, {});
  assert.equal(minted.status, 201, JSON.stringify(minted.data));
  const portUrl = minted.data.url as string;
  assert.notEqual(new URL(portUrl).origin, new URL(lab.server.url).origin);
  // Wait for the page to be served (the sandbox's server starts as it does): no fixed budget,
  // for as long as the sandbox runs.
  const first = await waitFor("the page to be served through its port URL", async () => {
    const r = await fetch(`${portUrl}/`).catch(() => undefined);
    if (r?.status === 200) return r;
    const env = await lab.api("GET", `/v1/envs/${sb.data.id}`);
    assert.equal(env.data.status, "running", JSON.stringify(env.data));
    return undefined;
  });
  assert.equal(first?.status, 200);
  assert.equal(first?.headers.get("cross-origin-opener-policy"), "same-origin");

  // The victim opens the link.
  await page.goto(`${portUrl}/`);
  await page.waitForFunction("document.title === 'done'");
  const out = JSON.parse((await page.locator("body").getAttribute("data-out")) ?? "{}") as Record<
    string,
    string
  >;
  process.stdout.write(`# the hostile page's attempts: ${JSON.stringify(out)}\n`);
  // Its own origin has no session to read; the console's answers are not readable cross-origin.
  assert.match(out.session_here ?? "", /^404 /);
  assert.doesNotMatch(out.session_here ?? "", /csrf/);
  assert.match(out.session_console ?? "", /^blocked: TypeError/);
  assert.match(out.approve_cors ?? "", /^blocked: TypeError/);
  assert.equal(out.cookies, "");
  // Nothing was approved and no key of the victim's team exists.
  const poll = await fetch(`${lab.server.url}/v1/device/token`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ device_code: code.device_code }),
  });
  assert.equal(((await poll.json()) as { status: string }).status, "pending");
  const keys = await lab.server.store
    .selectFrom("api_keys")
    .select("id")
    .where("team_id", "=", victimTeam)
    .execute();
  assert.equal(keys.length, 0);
  // And the API's origin serves no port URL at all.
  assert.equal((await fetch(`${lab.server.url}${new URL(portUrl).pathname}/`)).status, 404);
});

/**
 * A service whose WebSocket answers (its 101) set cookies: one for its own host, one for the parent
 * domain (`localhost`, which the ingress names `{port}-{id}.localhost` share, as names under one
 * `--ingress-domain` share theirs with a console on that domain). Its page opens that WebSocket.
 */
const COOKIE_SETTING_SERVICE = String.raw`
import socket, threading, base64, hashlib
PAGE = b"""<!doctype html><title>loading</title><script>
const path = location.pathname.replace(/\/?$/, "/") + "ws" + location.search;
const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + path);
ws.onopen = () => { document.title = "open"; };
ws.onerror = () => { document.title = "error"; };
</script>"""
def handle(c):
    data = b""
    while b"\r\n\r\n" not in data:
        d = c.recv(4096)
        if not d:
            return
        data += d
    lines = data.split(b"\r\n\r\n")[0].decode("latin1").split("\r\n")
    hdr = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
    if hdr.get("upgrade", "").lower() == "websocket":
        acc = base64.b64encode(hashlib.sha1((hdr["sec-websocket-key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()).decode()
        c.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc
            + "\r\nSet-Cookie: denv_session=attacker-chosen; Path=/\r\nSet-Cookie: tossed=attacker-chosen; Domain=localhost; Path=/\r\n\r\n").encode())
        threading.Event().wait(600)
    else:
        c.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\nconnection: close\r\ncontent-length: " + str(len(PAGE)).encode() + b"\r\n\r\n" + PAGE)
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 9100))
s.listen(16)
while True:
    c, _ = s.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
`;

test("a sandbox's WebSocket answer sets no cookie, by port URL or by name; the console's session is as it was", async () => {
  const context = page.context();
  const sessionBefore = (await context.cookies()).find((c) => c.name === "__Host-denv_session");
  assert.ok(sessionBefore, "the victim is signed in (the first test)");
  const sb = await lab.api("POST", "/v1/sandboxes", {
    image: "127.0.0.1:5000/denv/openenv-echo:0.1",
    cmd: ["sh", "-c", "while [ ! -e /tmp/service.py ]; do sleep 0.1; done; exec python3 /tmp/service.py"],
  });
  assert.equal(sb.status, 201, JSON.stringify(sb.data));
  const put = await lab.api("POST", `/v1/envs/${sb.data.id}/exec`, {
    command: ["sh", "-c", "cat > /tmp/service.py.part && mv /tmp/service.py.part /tmp/service.py"],
    stdin: Buffer.from(COOKIE_SETTING_SERVICE).toString("base64"),
  });
  assert.equal(put.data.exit_code, 0, JSON.stringify(put.data));
  const minted = await lab.api("POST", `/v1/envs/${sb.data.id}/ports/9100`, {});
  assert.equal(minted.status, 201, JSON.stringify(minted.data));
  const ingress = await lab.api("GET", `/v1/envs/${sb.data.id}/ingress`);
  assert.ok(lab.server.ingressDomain, "the server has ingress names");
  const byName = `http://9100-${String(sb.data.id).replace(/^env_/, "")}.${lab.server.ingressDomain}/?_denv_token=${ingress.data.token}`;
  // The service is up once its port URL serves the page (waited on for as long as the sandbox runs).
  await waitFor("the page to be served through its port URL", async () => {
    const r = await fetch(`${minted.data.url}/`).catch(() => undefined);
    if (r?.status === 200) return true;
    const env = await lab.api("GET", `/v1/envs/${sb.data.id}`);
    assert.equal(env.data.status, "running", JSON.stringify(env.data));
    return false;
  });
  for (const url of [`${minted.data.url}/`, byName]) {
    await page.goto(url);
    await page.waitForFunction("document.title !== 'loading'");
    assert.equal(await page.title(), "open", `the page's WebSocket did not open at ${url}`);
    const cookies = await context.cookies();
    assert.deepEqual(
      cookies.filter((c) => c.value === "attacker-chosen").map((c) => `${c.name}@${c.domain}`),
      [],
      `a cookie the sandbox's WebSocket answer set was kept (${url})`,
    );
    const session = cookies.find((c) => c.name === "__Host-denv_session");
    assert.equal(session?.value, sessionBefore.value, "the console's session cookie is as it was");
  }
  // And the console still knows the person by that session.
  await page.goto(lab.server.url);
  const still = await page.evaluate(
    async () => (await fetch("/v1/auth/session", { credentials: "include" })).status,
  );
  assert.equal(still, 200);
});
