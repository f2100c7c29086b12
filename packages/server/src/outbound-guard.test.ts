import assert from "node:assert/strict";
import { createServer, get, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, test } from "node:test";
import { FetchPolicy } from "./fetch-policy.ts";
import { isPublicAddress, onTeamsBehalf, resolveChecked } from "./outbound-guard.ts";

/** A provider's endpoint on loopback, and an "internal" service beside it that no team may reach. */
let provider: Server;
let internal: Server;
let providerHost: string;
let internalHost: string;
const internalSaw: string[] = [];

before(async () => {
  internal = createServer((req, res) => {
    internalSaw.push(`${req.method} ${req.url} ${req.headers.authorization ?? ""}`);
    res.end("SECRET-OF-THE-INTERNAL-SERVICE");
  });
  await new Promise<void>((r) => internal.listen(0, "127.0.0.1", r));
  internalHost = `127.0.0.1:${(internal.address() as AddressInfo).port}`;
  provider = createServer((req, res) => {
    // Every path but /ok sends the client on to the internal service.
    if (req.url === "/ok") return void res.end("fine");
    res.writeHead(307, { location: `http://${internalHost}/steal` }).end();
  });
  await new Promise<void>((r) => provider.listen(0, "127.0.0.1", r));
  providerHost = `127.0.0.1:${(provider.address() as AddressInfo).port}`;
});

after(() => {
  provider.close();
  internal.close();
});

const policy = () => new FetchPolicy([providerHost]);

test("an allowed host answers; a redirect to a host not allowed is refused before a byte reaches it", async () => {
  const ok = await onTeamsBehalf(policy(), "a provider", () => fetch(`http://${providerHost}/ok`));
  assert.equal(await ok.text(), "fine");
  await assert.rejects(
    onTeamsBehalf(policy(), "a provider", () =>
      fetch(`http://${providerHost}/redirect`, { headers: { authorization: "Bearer team-key" } }),
    ),
    (err: Error) => {
      const cause = (err.cause as Error | undefined)?.message ?? "";
      assert.match(cause, /is not a host this server connects to for teams/);
      assert.ok(!`${err.message} ${cause}`.includes("SECRET"));
      return true;
    },
  );
  assert.deepEqual(internalSaw, [], "the internal service saw nothing (and no key)");
});

test("every library's connections are held, not only fetch's: node:http too", async () => {
  const status = await onTeamsBehalf(
    policy(),
    "a provider",
    () =>
      new Promise<string>((resolve) => {
        const req = get(`http://${internalHost}/direct`);
        req.on("response", (res) => resolve(`answered ${res.statusCode}`));
        req.on("error", (err) => resolve(err.message));
      }),
  );
  assert.match(status, /is not a host this server connects to for teams/);
  assert.deepEqual(internalSaw, []);
});

test("an allowed name that resolves to this machine is refused; the address itself, allowed, is not", async () => {
  const port = Number(providerHost.split(":")[1]);
  const byName = new FetchPolicy([`localhost:${port}`]);
  await assert.rejects(
    onTeamsBehalf(byName, "a provider", () => fetch(`http://localhost:${port}/ok`)),
    (err: Error) =>
      /localhost resolves to (127\.0\.0\.1|::1), an address of this machine/.test(
        String((err.cause as Error)?.message),
      ),
  );
  await assert.rejects(resolveChecked(byName, "localhost", port, "git"), /resolves to/);
  assert.deepEqual(await resolveChecked(policy(), "127.0.0.1", port, "git"), ["127.0.0.1"]);
  // A policy of "*" (a closed network's server) allows anything.
  const any = new FetchPolicy(["*"]);
  assert.equal(
    await (await onTeamsBehalf(any, "x", () => fetch(`http://localhost:${port}/ok`))).text(),
    "fine",
  );
});

test("outside a team's scope nothing is held; unix sockets are refused inside it", async () => {
  assert.equal(
    await (await fetch(`http://${internalHost}/server-own`)).text(),
    "SECRET-OF-THE-INTERNAL-SERVICE",
  );
  internalSaw.length = 0;
  const r = await onTeamsBehalf(
    new FetchPolicy(["*"]),
    "a provider",
    () =>
      new Promise<string>((resolve) => {
        const req = get({ socketPath: "/var/run/docker.sock", path: "/version" });
        req.on("response", () => resolve("answered"));
        req.on("error", (err) => resolve(err.message));
      }),
  );
  assert.match(r, /a local socket is not a place/);
});

test("public and private addresses, IPv4, IPv6 and IPv4 carried in IPv6", () => {
  for (const a of ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"]) assert.equal(isPublicAddress(a), true, a);
  for (const a of [
    "127.0.0.1",
    "10.1.2.3",
    "172.20.0.1",
    "192.168.1.1",
    "169.254.169.254",
    "100.64.0.1",
    "0.0.0.0",
    "::1",
    "::",
    "fd00::1",
    "fe80::1",
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
  ])
    assert.equal(isPublicAddress(a), false, a);
});

test("the server's own sockets (its database's) connect from within a team's scope", async () => {
  const { serversOwnSocket } = await import("./outbound-guard.ts");
  const [host, port] = internalHost.split(":") as [string, string];
  const connected = await onTeamsBehalf(
    new FetchPolicy([]),
    "a provider",
    () =>
      new Promise<string>((resolve) => {
        const s = serversOwnSocket();
        s.once("connect", () => {
          s.destroy();
          resolve("connected");
        });
        s.once("error", (err) => resolve(err.message));
        s.connect(Number(port), host);
      }),
  );
  assert.equal(connected, "connected");
});
