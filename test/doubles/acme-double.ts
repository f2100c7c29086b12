/**
 * A local ACME CA (RFC 8555) for tests: a directory, nonces, accounts, orders, dns-01 challenges
 * and finalize, each request a JWS whose signature and single-use nonce are checked. A dns-01
 * challenge is validated by asking a resolver the test names (a dnsmasq it started) for the TXT
 * record; a certificate is signed by the test's CA with openssl. Never a public CA.
 */
import { execFileSync } from "node:child_process";
import { createHash, createPublicKey, type JsonWebKey, randomBytes, verify } from "node:crypto";
import { Resolver } from "node:dns/promises";
import { writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";

interface Order {
  status: string;
  identifiers: { type: string; value: string }[];
  authz: number;
  certificate?: string;
}

interface Challenge {
  token: string;
  status: "pending" | "valid" | "invalid";
  domain: string;
  wildcard: boolean;
  jwk: JsonWebKey;
  error?: string;
}

export interface AcmeDouble {
  directoryUrl: string;
  /** How many orders were placed, and finalized. */
  orders: () => number;
  finalized: () => number;
  close(): Promise<void>;
}

const b64u = (b: Buffer | string) => Buffer.from(b).toString("base64url");

/** RFC 7638: the key's thumbprint, over its required members in order. */
function thumbprint(jwk: JsonWebKey): string {
  const members =
    jwk.kty === "RSA"
      ? { e: jwk.e, kty: jwk.kty, n: jwk.n }
      : { crv: jwk.crv, kty: jwk.kty, x: jwk.x, y: jwk.y };
  return createHash("sha256").update(JSON.stringify(members)).digest("base64url");
}

export async function startAcmeDouble(o: {
  dir: string;
  caCert: string;
  caKey: string;
  /** host:port of the resolver the challenges are checked against. */
  resolver: string;
  /** Days the certificates it issues are valid for. */
  days?: number;
}): Promise<AcmeDouble> {
  const nonces = new Set<string>();
  const accounts = new Map<string, JsonWebKey>();
  const orders = new Map<number, Order>();
  const challenges = new Map<number, Challenge>();
  const certs = new Map<number, string>();
  let next = 1;
  let finalized = 0;
  const resolver = new Resolver();
  resolver.setServers([o.resolver]);
  let base = "";

  const nonce = () => {
    const n = b64u(randomBytes(16));
    nonces.add(n);
    return n;
  };
  const send = (res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}) => {
    const text = typeof body === "string" ? body : JSON.stringify(body);
    res.writeHead(status, {
      "replay-nonce": nonce(),
      "content-type": typeof body === "string" ? "application/pem-certificate-chain" : "application/json",
      ...headers,
    });
    res.end(text);
  };
  const problem = (res: ServerResponse, status: number, type: string, detail: string) =>
    send(
      res,
      status,
      { type: `urn:ietf:params:acme:error:${type}`, detail },
      { "content-type": "application/problem+json" },
    );

  /** The JWS's payload once its nonce, URL and signature hold; the account's key with it. */
  function verified(req: IncomingMessage, raw: string): { payload: any; jwk: JsonWebKey; kid?: string } {
    const jws = JSON.parse(raw) as { protected: string; payload: string; signature: string };
    const header = JSON.parse(Buffer.from(jws.protected, "base64url").toString()) as {
      alg: string;
      nonce: string;
      url: string;
      jwk?: JsonWebKey;
      kid?: string;
    };
    if (!nonces.delete(header.nonce)) throw Object.assign(new Error("bad nonce"), { acme: "badNonce" });
    if (header.url !== `${base}${req.url}`) throw new Error(`the JWS names ${header.url}, not this URL`);
    const jwk = header.jwk ?? accounts.get(header.kid ?? "");
    if (!jwk) throw Object.assign(new Error("no such account"), { acme: "accountDoesNotExist" });
    const key = createPublicKey({ key: jwk, format: "jwk" });
    const data = Buffer.from(`${jws.protected}.${jws.payload}`);
    const sig = Buffer.from(jws.signature, "base64url");
    const ok = header.alg.startsWith("RS")
      ? verify("sha256", data, key, sig)
      : verify("sha256", data, { key, dsaEncoding: "ieee-p1363" }, sig);
    if (!ok) throw new Error("the JWS signature does not verify");
    const payload = jws.payload === "" ? "" : JSON.parse(Buffer.from(jws.payload, "base64url").toString());
    return { payload, jwk, ...(header.kid ? { kid: header.kid } : {}) };
  }

  const orderBody = (id: number) => {
    const ord = orders.get(id) as Order;
    const ch = challenges.get(ord.authz) as Challenge;
    if (ord.status === "pending" && ch.status === "valid") ord.status = "ready";
    if (ch.status === "invalid") ord.status = "invalid";
    return {
      status: ord.status,
      identifiers: ord.identifiers,
      authorizations: [`${base}/authz/${ord.authz}`],
      finalize: `${base}/finalize/${id}`,
      ...(ord.certificate ? { certificate: ord.certificate } : {}),
    };
  };
  const challengeBody = (id: number) => {
    const c = challenges.get(id) as Challenge;
    return {
      type: "dns-01",
      url: `${base}/chall/${id}`,
      token: c.token,
      status: c.status,
      ...(c.error
        ? { error: { type: "urn:ietf:params:acme:error:incorrectResponse", detail: c.error } }
        : {}),
    };
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const url = req.url ?? "/";
    if (url === "/directory")
      return send(res, 200, {
        newNonce: `${base}/new-nonce`,
        newAccount: `${base}/new-account`,
        newOrder: `${base}/new-order`,
        revokeCert: `${base}/revoke`,
        keyChange: `${base}/key-change`,
        meta: { termsOfService: `${base}/terms` },
      });
    if (url === "/new-nonce") {
      res.writeHead(req.method === "HEAD" ? 200 : 204, {
        "replay-nonce": nonce(),
        "cache-control": "no-store",
      });
      return res.end();
    }
    let raw = "";
    for await (const c of req) raw += c;
    const { payload, jwk, kid } = verified(req, raw);
    const [, kind, idText] = url.split("/");
    const id = Number(idText);
    if (kind === "new-account") {
      const account = `${base}/acct/${thumbprint(jwk)}`;
      accounts.set(account, jwk);
      return send(res, 201, { status: "valid", contact: payload.contact ?? [] }, { location: account });
    }
    if (!kid) return problem(res, 400, "malformed", "requests after newAccount are signed by kid");
    if (kind === "new-order") {
      const identifiers = payload.identifiers as { type: string; value: string }[];
      const value = identifiers[0]?.value ?? "";
      const authz = next++;
      challenges.set(authz, {
        token: b64u(randomBytes(16)),
        status: "pending",
        domain: value.replace(/^\*\./, ""),
        wildcard: value.startsWith("*."),
        jwk,
      });
      const orderId = next++;
      orders.set(orderId, { status: "pending", identifiers, authz });
      return send(res, 201, orderBody(orderId), { location: `${base}/order/${orderId}` });
    }
    if (kind === "order") return send(res, 200, orderBody(id));
    if (kind === "authz") {
      const c = challenges.get(id) as Challenge;
      return send(res, 200, {
        status: c.status,
        identifier: { type: "dns", value: c.domain },
        wildcard: c.wildcard,
        challenges: [challengeBody(id)],
      });
    }
    if (kind === "chall") {
      const c = challenges.get(id) as Challenge;
      if (payload !== "" && c.status === "pending") {
        // The check a CA makes: the TXT record holds the key authorization's digest.
        const want = createHash("sha256")
          .update(`${c.token}.${thumbprint(c.jwk)}`)
          .digest("base64url");
        const got = await resolver.resolveTxt(`_acme-challenge.${c.domain}`).catch(() => [] as string[][]);
        if (got.some((r) => r.join("") === want)) c.status = "valid";
        else {
          c.status = "invalid";
          c.error = `no TXT record _acme-challenge.${c.domain} holds the key authorization (saw ${JSON.stringify(got)})`;
        }
      }
      return send(res, 200, challengeBody(id));
    }
    if (kind === "finalize") {
      const ord = orders.get(id) as Order;
      orderBody(id);
      if (ord.status !== "ready") return problem(res, 403, "orderNotReady", `the order is ${ord.status}`);
      const csr = join(o.dir, `csr-${id}.der`);
      writeFileSync(csr, Buffer.from(payload.csr as string, "base64url"));
      const pem = execFileSync("openssl", ["req", "-inform", "DER", "-in", csr], { cwd: o.dir });
      writeFileSync(join(o.dir, `csr-${id}.pem`), pem);
      const cert = execFileSync(
        "openssl",
        [
          "x509",
          "-req",
          "-in",
          `csr-${id}.pem`,
          "-CA",
          o.caCert,
          "-CAkey",
          o.caKey,
          "-CAcreateserial",
        ].concat(["-days", String(o.days ?? 90), "-copy_extensions", "copy"]),
        { cwd: o.dir },
      ).toString();
      certs.set(id, `${cert}${execFileSync("openssl", ["x509", "-in", o.caCert]).toString()}`);
      ord.status = "valid";
      ord.certificate = `${base}/cert/${id}`;
      finalized++;
      return send(res, 200, orderBody(id));
    }
    if (kind === "cert") return send(res, 200, certs.get(id) ?? "");
    return problem(res, 404, "malformed", `no such resource ${url}`);
  };

  const server: Server = createServer((req, res) => {
    handle(req, res).catch((err: Error & { acme?: string }) =>
      problem(res, 400, err.acme ?? "malformed", err.message),
    );
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    directoryUrl: `${base}/directory`,
    orders: () => orders.size,
    finalized: () => finalized,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
