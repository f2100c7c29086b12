import type { Command } from "commander";
import { UsageError } from "../output.ts";

/**
 * `denv backup` and `denv restore`: a server's data directory (its SQLite store as one consistent
 * copy, secret.key, build contexts) to one tar, and back onto a fresh directory (docs/operations.md).
 */
function registerBackup(program: Command): void {
  program
    .command("backup")
    .description(
      "Write a server's backup: its store (SQLite; on PostgreSQL, pg_dump it), secret.key and build contexts, in one tar readable by its owner only; safe while the server runs",
    )
    .argument("<file>", "the tar to write")
    .option("--data-dir <dir>", "the server's --data-dir", "/var/lib/denv-server")
    .option("--json", "print JSON")
    .action(async (file: string, o: { dataDir: string; json?: boolean }) => {
      const { backupDataDir } = await import("@denv/server");
      const r = await backupDataDir(o.dataDir, file);
      if (o.json) process.stdout.write(`${JSON.stringify(r)}\n`);
      else
        process.stdout.write(
          `wrote ${file}: ${r.files.length} file(s), ${r.bytes} bytes${r.store ? "" : " (the store is on PostgreSQL: dump it with pg_dump beside this)"}\n`,
        );
    });
  program
    .command("restore")
    .description(
      "Restore a backup into an empty --data-dir; `denv server --data-dir DIR` then serves the same teams, keys and versions once the hosts connect to it",
    )
    .argument("<file>", "the tar `denv backup` wrote")
    .requiredOption("--data-dir <dir>", "an empty directory for the restored server")
    .option("--json", "print JSON")
    .action(async (file: string, o: { dataDir: string; json?: boolean }) => {
      const { restoreDataDir } = await import("@denv/server");
      const r = await restoreDataDir(file, o.dataDir);
      if (o.json) process.stdout.write(`${JSON.stringify(r)}\n`);
      else
        process.stdout.write(
          `restored ${r.files.length} file(s) into ${o.dataDir}; start it: denv server --data-dir ${o.dataDir}\n`,
        );
    });
}

export function registerServer(program: Command): void {
  registerBackup(program);
  program
    .command("server")
    .description("Run the control plane: the /v1 API and the sidecars' WebSocket hub on one port")
    .option(
      "--data-dir <dir>",
      "where the server keeps its files: the SQLite store (unless --database-url), secret.key, build contexts",
      "/var/lib/denv-server",
    )
    .option(
      "--database-url <url>",
      "keep the store in PostgreSQL (postgres://…) instead of SQLite; default DENV_DATABASE_URL",
    )
    .option("--port <port>", "port to listen on", "7070")
    .option("--host <addr>", "address to listen on", "127.0.0.1")
    .option(
      "--ports-origin <origin>",
      "where port URLs are served, never the API's origin: https://{token}.ports.example.com (an origin per port URL; wildcard DNS and certificate) or a plain origin reaching --ports-port (default http://localhost:<ports port> on loopback)",
    )
    .option(
      "--host-wait-s <seconds>",
      "how long a call waits for a host that is not connected (a denvd restarting) before host_unavailable",
      "10",
    )
    .option(
      "--host-lost-after-s <seconds>",
      "how long a host may go unseen (no connection, no heartbeat) before its environments are marked lost",
      "300",
    )
    .option(
      "--team-quota-gib <gib>",
      "what each team may keep stored in build contexts and git archives",
      "10",
    )
    .option("--ports-port <port>", "port the port-URL listener binds on --host (default: the API's port + 1)")
    .option(
      "--ingress-domain <domain>",
      "names for published ports under DOMAIN[:PORT] ({port}-{id}.DOMAIN and {service}.{env}.{project}.DOMAIN, served on --ports-port; wildcard DNS to this server, and with --tls-cert a certificate for *.DOMAIN); none turns names off (default localhost:<ports port> on loopback, none otherwise)",
    )
    .option("--ports-host <addr>", "address the port-URL and ingress listener binds (default --host)")
    .option(
      "--ports-tls-cert <path>",
      "serve port URLs and ingress names over HTTPS with this certificate (PEM; a wildcard for *.DOMAIN), whatever the API uses; default --tls-cert",
    )
    .option("--ports-tls-key <path>", "and this private key (PEM)")
    .option(
      "--acme-directory <url>",
      "have the ports listener's *.DOMAIN certificate issued (and renewed) by this ACME CA over DNS-01; with --acme-email and --acme-dns-hook",
    )
    .option("--acme-email <email>", "the ACME account's contact")
    .option(
      "--acme-dns-hook <command>",
      "publishes the challenge's TXT record: run as COMMAND set|unset NAME VALUE, returning once the record is served",
    )
    .option("--tls-cert <path>", "serve HTTPS with this certificate (PEM)")
    .option("--tls-key <path>", "and this private key (PEM)")
    .option(
      "--public-url <url>",
      "the URL machines it provisions reach it at (default: the URL it listens on); DENV_PUBLIC_URL",
    )
    .option(
      "--allow-fetch <hosts>",
      "hosts (host, host:port or *.domain, comma-separated) the server may fetch from for teams — registries, git sources, cloud APIs — besides the public ones; DENV_FETCH_ALLOW",
    )
    .option(
      "--peer-url <url>",
      "where the other replicas on the same --database-url reach this one (default: the URL it listens on); DENV_PEER_URL",
    )
    .option(
      "--lease-s <seconds>",
      "how long a deployment's lease lasts unrenewed before another replica takes it over and ends it",
      "15",
    )
    .option(
      "--downloads-dir <dir>",
      "where the denvd executables for /install.sh are (default: the checkout's dist/, built by scripts/build-denvd.sh)",
    )
    .addHelpText(
      "after",
      `
The first start creates the admin team and prints its API key once; set DENV_ADMIN_KEY to choose it.
For teams, the server fetches only from public registries, git hosts and cloud APIs (Docker Hub, ghcr.io,
quay.io, gcr.io, GitHub, GitLab, api.hetzner.cloud, ...) and the hosts --allow-fetch adds.

Examples:
  denv server --data-dir ./denv-data --port 7070
  DENV_ADMIN_KEY=dk_example denv server --host 0.0.0.0 --tls-cert cert.pem --tls-key key.pem
  denv server --allow-fetch registry.internal:5000,git.internal
  DENV_SECRET_KEY=… denv server --database-url postgres://db/denv --host 0.0.0.0 --peer-url http://10.0.0.5:7070
    (every replica on one database shares DENV_SECRET_KEY; docs/scale-out.md)`,
    )
    .action(
      async (o: {
        dataDir: string;
        databaseUrl?: string;
        port: string;
        host: string;
        tlsCert?: string;
        tlsKey?: string;
        downloadsDir?: string;
        publicUrl?: string;
        allowFetch?: string;
        portsOrigin?: string;
        portsPort?: string;
        ingressDomain?: string;
        portsHost?: string;
        portsTlsCert?: string;
        portsTlsKey?: string;
        acmeDirectory?: string;
        acmeEmail?: string;
        acmeDnsHook?: string;
        teamQuotaGib: string;
        hostWaitS: string;
        hostLostAfterS: string;
        peerUrl?: string;
        leaseS: string;
      }) => {
        const leaseS = Number(o.leaseS);
        if (!Number.isFinite(leaseS) || leaseS < 1 || leaseS > 3600)
          throw new UsageError(`--lease-s ${o.leaseS} is not a number of seconds from 1 to 3600`);
        const peerUrl = o.peerUrl ?? process.env.DENV_PEER_URL;
        if (peerUrl && !/^https?:\/\/[^/]+\/?$/.test(peerUrl))
          throw new UsageError(`--peer-url ${peerUrl} is not an http(s) origin such as http://10.0.0.5:7070`);
        const lostAfterS = Number(o.hostLostAfterS);
        if (!Number.isFinite(lostAfterS) || lostAfterS < 10 || lostAfterS > 86_400)
          throw new UsageError(
            `--host-lost-after-s ${o.hostLostAfterS} is not a number of seconds from 10 to 86400`,
          );
        const hostWaitS = Number(o.hostWaitS);
        if (!Number.isFinite(hostWaitS) || hostWaitS < 0 || hostWaitS > 3600)
          throw new UsageError(`--host-wait-s ${o.hostWaitS} is not a number of seconds from 0 to 3600`);
        const quotaGib = Number(o.teamQuotaGib);
        if (!Number.isFinite(quotaGib) || quotaGib <= 0)
          throw new UsageError(`--team-quota-gib ${o.teamQuotaGib} is not a positive number of GiB`);
        if (Boolean(o.tlsCert) !== Boolean(o.tlsKey))
          throw new UsageError("--tls-cert and --tls-key go together");
        if (Boolean(o.portsTlsCert) !== Boolean(o.portsTlsKey))
          throw new UsageError("--ports-tls-cert and --ports-tls-key go together");
        const acmeGiven = [o.acmeDirectory, o.acmeEmail, o.acmeDnsHook].filter(Boolean).length;
        if (acmeGiven !== 0 && acmeGiven !== 3)
          throw new UsageError("--acme-directory, --acme-email and --acme-dns-hook go together");
        if (acmeGiven && (!o.ingressDomain || o.ingressDomain === "none"))
          throw new UsageError("--acme-directory issues *.DOMAIN for --ingress-domain: give the domain");
        if (acmeGiven && o.portsTlsCert)
          throw new UsageError(
            "--acme-directory and --ports-tls-cert both give the ports listener's certificate: choose one",
          );
        const port = Number(o.port);
        if (!Number.isInteger(port) || port < 0 || port > 65535)
          throw new UsageError(`--port ${o.port} is not a port`);
        const portsPort = o.portsPort === undefined ? (port === 0 ? 0 : port + 1) : Number(o.portsPort);
        if (
          !Number.isInteger(portsPort) ||
          portsPort < 0 ||
          portsPort > 65535 ||
          (portsPort === port && port !== 0)
        )
          throw new UsageError(`--ports-port ${o.portsPort ?? portsPort} is not a port other than --port`);
        const { dnsHook, IngressNames, parseFetchAllow, PortsOrigin, startServer } = await import(
          "@denv/server"
        );
        const ingressDomain = o.ingressDomain === "none" ? null : o.ingressDomain;
        if (ingressDomain) {
          try {
            new IngressNames({ domain: ingressDomain, scheme: "http" }, () => "");
          } catch (err) {
            throw new UsageError(`--ingress-domain: ${(err as Error).message}`);
          }
        }
        if (o.portsOrigin) {
          try {
            new PortsOrigin(o.portsOrigin);
          } catch (err) {
            throw new UsageError(`--ports-origin: ${(err as Error).message}`);
          }
        }
        const server = await startServer({
          fetchAllow: parseFetchAllow(o.allowFetch),
          dataDir: o.dataDir,
          databaseUrl: o.databaseUrl ?? process.env.DENV_DATABASE_URL,
          port,
          host: o.host,
          portsPort,
          teamQuotaBytes: Math.floor(quotaGib * 1024 ** 3),
          hostWaitMs: Math.round(hostWaitS * 1000),
          hostWatch: { lostAfterMs: Math.round(lostAfterS * 1000) },
          leaseMs: Math.round(leaseS * 1000),
          ...(peerUrl ? { peerUrl } : {}),
          ...(ingressDomain !== undefined ? { ingress: { domain: ingressDomain } } : {}),
          ...(o.portsHost ? { portsHost: o.portsHost } : {}),
          ...(o.acmeDirectory && o.acmeEmail && o.acmeDnsHook
            ? { acme: { directoryUrl: o.acmeDirectory, email: o.acmeEmail, dns: dnsHook(o.acmeDnsHook) } }
            : {}),
          ...(o.portsTlsCert && o.portsTlsKey
            ? { portsTls: { certPath: o.portsTlsCert, keyPath: o.portsTlsKey } }
            : {}),
          ...(o.portsOrigin ? { portsOrigin: o.portsOrigin } : {}),
          ...(o.tlsCert && o.tlsKey ? { tls: { certPath: o.tlsCert, keyPath: o.tlsKey } } : {}),
          adminKey: process.env.DENV_ADMIN_KEY,
          ...(o.downloadsDir ? { downloadsDir: o.downloadsDir } : {}),
          ...((o.publicUrl ?? process.env.DENV_PUBLIC_URL)
            ? { publicUrl: o.publicUrl ?? process.env.DENV_PUBLIC_URL }
            : {}),
        });
        process.stdout.write(`denv server listening on ${server.url}\n`);
        process.stdout.write(`port URLs served on ${server.portsOrigin} (listening on ${server.portsUrl})\n`);
        if (server.ingressDomain) process.stdout.write(`ingress names under ${server.ingressDomain}\n`);
        if (server.adminKey) process.stdout.write(`admin API key (shown once): ${server.adminKey}\n`);
        if (server.recovered.length) {
          process.stdout.write(
            `rolled back ${server.recovered.length} deployment(s) interrupted by the last stop\n`,
          );
        }
        const stop = async () => {
          await server.close();
          process.exit(0);
        };
        process.on("SIGINT", stop);
        process.on("SIGTERM", stop);
        await new Promise(() => {});
      },
    );
}
