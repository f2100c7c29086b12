/**
 * The ports listener's wildcard certificate (`*.<ingress domain>`) issued by an ACME CA over
 * DNS-01, with acme-client: one wildcard, not a certificate per sandbox (which would run into a
 * public CA's rate limits at fork scale). The TXT record is published by whatever the
 * administrator gives (`dns.set`/`dns.unset`, or `denv server --acme-dns-hook CMD`, run as
 * `CMD set|unset NAME VALUE`). The certificate and its key are kept in the server's data directory
 * (mode 0600) and reused while they have more than `renewBeforeMs` left; past that a new one is
 * issued, and a failed renewal keeps the one in use.
 */
import { execFile } from "node:child_process";
import { X509Certificate } from "node:crypto";
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

export interface AcmeDns {
  /** Publishes a TXT record (`_acme-challenge.<domain>`) and resolves once it is served. */
  set(name: string, value: string): Promise<void>;
  unset(name: string, value: string): Promise<void>;
}

export interface AcmeOptions {
  /** The CA's ACME directory (no default: a test or a machine never reaches a public CA unasked). */
  directoryUrl: string;
  /** The account's contact address. */
  email: string;
  dns: AcmeDns;
  /** A certificate with less than this left is renewed (default 30 days). */
  renewBeforeMs?: number;
}

export interface IngressTls {
  cert: Buffer;
  key: Buffer;
}

/** A DNS hook as a command: `CMD set NAME VALUE`, `CMD unset NAME VALUE`, each within 120 s. */
export function dnsHook(command: string): AcmeDns {
  const call = async (verb: string, name: string, value: string) => {
    try {
      await run(command, [verb, name, value], { timeout: 120_000 });
    } catch (err) {
      throw new Error(`the ACME DNS hook ${command} ${verb} ${name} failed: ${(err as Error).message}`);
    }
  };
  return { set: (n, v) => call("set", n, v), unset: (n, v) => call("unset", n, v) };
}

export class AcmeCertificates {
  private readonly dir: string;
  /** The ingress domain without a port. */
  private readonly domain: string;
  private readonly options: AcmeOptions;

  constructor(dataDir: string, domain: string, options: AcmeOptions) {
    this.domain = domain;
    this.options = options;
    this.dir = join(dataDir, "ingress-tls");
  }

  /** The stored certificate, when it has more than renewBeforeMs left. */
  stored(nowMs = Date.now()): IngressTls | null {
    try {
      const cert = readFileSync(join(this.dir, "cert.pem"));
      const key = readFileSync(join(this.dir, "key.pem"));
      const x = new X509Certificate(cert);
      const left = new Date(x.validTo).getTime() - nowMs;
      const covers = x.checkHost(`x.${this.domain}`) !== undefined;
      return covers && left > (this.options.renewBeforeMs ?? 30 * 86_400_000) ? { cert, key } : null;
    } catch {
      return null;
    }
  }

  /** The stored certificate if it is still good, or a new one from the CA (stored before it is used). */
  async ensure(): Promise<{ tls: IngressTls; issued: boolean }> {
    const kept = this.stored();
    if (kept) return { tls: kept, issued: false };
    return { tls: await this.issue(), issued: true };
  }

  private async issue(): Promise<IngressTls> {
    // Loaded only to issue: the ACME client costs a process ≈ 35 MiB, which a server without
    // ACME (or holding a valid certificate) should not carry.
    const acme = await import("acme-client");
    const wildcard = `*.${this.domain}`;
    const client = new acme.Client({
      directoryUrl: this.options.directoryUrl,
      accountKey: await acme.crypto.createPrivateKey(),
    });
    const [key, csr] = await acme.crypto.createCsr({ commonName: wildcard, altNames: [wildcard] });
    let cert: string;
    try {
      cert = await client.auto({
        csr,
        email: this.options.email,
        termsOfServiceAgreed: true,
        challengePriority: ["dns-01"],
        // The CA checks the record; a local lookup would ask this machine's resolver, which may
        // not see the zone the hook wrote to.
        skipChallengeVerification: true,
        challengeCreateFn: async (authz, _challenge, keyAuthorization) =>
          this.options.dns.set(`_acme-challenge.${authz.identifier.value}`, keyAuthorization),
        challengeRemoveFn: async (authz, _challenge, keyAuthorization) =>
          this.options.dns.unset(`_acme-challenge.${authz.identifier.value}`, keyAuthorization),
      });
    } catch (err) {
      throw new Error(
        `ACME: ${wildcard} could not be issued by ${this.options.directoryUrl}: ${(err as Error).message}`,
      );
    }
    const x = new X509Certificate(cert);
    if (x.checkHost(`x.${this.domain}`) === undefined)
      throw new Error(`ACME: the certificate ${this.options.directoryUrl} issued does not cover ${wildcard}`);
    // Written whole, then moved into place: a crash never leaves half a key or a key without its cert.
    mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    for (const [name, body] of [
      ["key.pem", key],
      ["cert.pem", Buffer.from(cert)],
    ] as const) {
      writeFileSync(join(this.dir, `${name}.new`), body, { mode: 0o600 });
      renameSync(join(this.dir, `${name}.new`), join(this.dir, name));
    }
    return { cert: Buffer.from(cert), key };
  }
}
