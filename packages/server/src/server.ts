/**
 * `denv server`: the /v1 API and the sidecars' WebSocket hub on one port, over TLS when given a
 * certificate. The first start creates the admin team and prints its key (or takes DENV_ADMIN_KEY).
 */

import { readFileSync } from "node:fs";
import {
  createServer as createHttpServer,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { AddressInfo } from "node:net";
import { ComposeValidator } from "@denv/spec";
import { getRequestListener } from "@hono/node-server";
import { closesUnread } from "./api/request-bodies.ts";
import { createApp } from "./app.ts";
import { BuildContexts } from "./build-contexts.ts";
import { Provisioner } from "./clouds/provisioner.ts";
import { SecretBox } from "./clouds/secret-box.ts";
import { type ContextExpiryOptions, startContextExpiry } from "./context-expiry.ts";
import { Deployer } from "./deployments/deployer.ts";
import { recoverReplays } from "./deployments/replay-runner.ts";
import { PoolKeeper, type PoolKeeperOptions } from "./environments/pool-keeper.ts";
import { FetchPolicy } from "./fetch-policy.ts";
import { type HostWatchOptions, startHostWatch } from "./fleet/host-watch.ts";
import { ReplicaKeeper, type ReplicaKeeperOptions } from "./fleet/replica-keeper.ts";
import { Replicator } from "./fleet/replication.ts";
import { GitHubApps } from "./github/github-apps.ts";
import { AcmeCertificates, type AcmeOptions } from "./ingress/acme-certificates.ts";
import { createInvitation } from "./people/invitations.ts";
import { Admission, type AdmissionOptions } from "./placement/admission.ts";
import { listen, PortsListener } from "./ports-listener.ts";
import type { RateLimitOptions } from "./rate-limit.ts";
import { DeploymentLeases } from "./replicas/deployment-leases.ts";
import { linkKey } from "./replicas/link-key.ts";
import { CONTEXTS_PATH, contextsFromPeers, servePeerContext } from "./replicas/peer-contexts.ts";
import { ReplicaRegistry } from "./replicas/replica-registry.ts";
import { openStoreNotices } from "./replicas/store-notices.ts";
import { serverLog } from "./server-log.ts";
import { ServerMetrics } from "./server-metrics.ts";
import { hostFigureTotals } from "./store/host-store.ts";
import { openStore, type Store } from "./store/open-store.ts";
import { poolTotals } from "./store/pool-store.ts";
import { projectTexts, setProjectTexts } from "./store/project-store.ts";
import {
  adminTeamId,
  anyTeam,
  createApiKey,
  createJoinToken,
  createTeam,
  findApiKey,
} from "./store/team-store.ts";
import { setVersionSpecText, versionSpecTexts } from "./store/version-store.ts";
import { DenvdHosts } from "./targets/denvd/denvd-hosts.ts";

export interface ServerOptions {
  dataDir: string;
  /** postgres://… to keep the store in PostgreSQL instead of SQLite in dataDir. */
  databaseUrl?: string;
  /** How long a query waits for a PostgreSQL that is away before it fails as unavailable (default 30 s). */
  storeWaitMs?: number;
  port?: number;
  host?: string;
  tls?: { certPath: string; keyPath: string };
  /** The admin key to create on first start; a random one is made and returned otherwise. */
  adminKey?: string;
  joinWaitMs?: number;
  /** How often a quiet command's stream carries a keep-alive (default KEEPALIVE_INTERVAL_MS). */
  /** How often E2B sandboxes past their timeout are killed (default 2000 ms). */
  e2bSweepMs?: number;
  /** How often environments idle past x-denv.idle_pause_s are paused (default 5 s; 0: never, a test drives it). */
  idleSweepMs?: number;
  keepAliveMs?: number;
  /** Where the denvd executables are (default: the checkout's dist/, or DENV_DOWNLOADS_DIR). */
  downloadsDir?: string;
  /** The URL machines the server creates reach it at (default: the URL it listens on). */
  publicUrl?: string;
  /** How long a deploy waits for a machine it provisioned to join (default 15 minutes). */
  provisionJoinWaitMs?: number;
  /** How long a call waits for a host that is not connected before host_unavailable (default 10 s). */
  hostWaitMs?: number;
  /** When a host unseen marks its environments lost, and how often hosts are looked at. */
  hostWatch?: HostWatchOptions;
  /** How versions' x-denv.replicas are kept (replica-keeper.ts). */
  replicaKeeper?: ReplicaKeeperOptions;
  /**
   * Hosts the server may fetch from for teams (registries, git sources, cloud APIs), beyond
   * DEFAULT_FETCH_ALLOW and DENV_FETCH_ALLOW: `host`, `host:port`, `*.domain` or `*`.
   */
  fetchAllow?: string[];
  /** The budget for checking one compose file (default 10 s, 256 MiB). */
  composeBudget?: { timeoutMs?: number; maxHeapMb?: number };
  /** Requests per API key (default 2,000 a second sustained, bursts of 4,000). */
  rateLimit?: RateLimitOptions;
  /** Sign-ins and sign-ups per email, device lookups per person (app.ts's default). */
  accountRateLimit?: RateLimitOptions;
  /** Create turns and room per host (admission.ts). */
  admission?: AdmissionOptions;
  /** How warm pools are refilled (pool-keeper.ts). */
  pools?: PoolKeeperOptions;
  /** How long a request waiting for a verdict is held before `timeout` (default 240 s). */
  answerWithinMs?: number;
  /**
   * Where port URLs are served: `https://{token}.ports.example.com` (one origin per port URL) or a
   * plain origin. Default: the ports listener's own address, on `localhost` when the server listens
   * on 127.0.0.1 (another site to the browser, so not even SameSite cookies cross).
   */
  portsOrigin?: string;
  /** What each team may keep in build contexts and git archives (default 10 GiB). */
  teamQuotaBytes?: number;
  /** How unreferenced build contexts expire (context-expiry.ts). */
  contextExpiry?: ContextExpiryOptions;
  /** The port the ports listener binds (default: any free one). It binds `host`, as the API does. */
  portsPort?: number;
  /** The address the ports listener binds (default: `host`): names can face the world, the API not. */
  portsHost?: string;
  /**
   * The ports listener's own certificate (say, a wildcard for `*.<ingress domain>`); default: `tls`.
   * With it, port URLs and names are served over HTTPS whatever the API is served over.
   */
  portsTls?: { certPath: string; keyPath: string };
  /**
   * Where the other replicas on the same PostgreSQL reach this one (default: the URL it listens
   * on). Calls for the hosts connected here come through it (targets/denvd/peer-links.ts).
   */
  peerUrl?: string;
  /** How long a deployment's lease lasts unrenewed before another replica takes it over (default 15 s). */
  leaseMs?: number;
  /**
   * Ingress names for published ports, served on the ports listener (ingress/ingress-names.ts).
   * `domain` is `HOST[:PORT]` (the port clients use; default the ports listener's); null turns names
   * off. Default: `localhost:<ports port>` when the server listens on loopback, none otherwise.
   */
  ingress?: { domain?: string | null; idleMs?: number; lifetimeMs?: number };
  /** The ports listener's wildcard certificate for the ingress domain from an ACME CA (acme-certificates.ts). */
  acme?: AcmeOptions & { checkEveryMs?: number };
}

export interface RunningServer {
  url: string;
  /** Where port URLs are served (never `url`'s origin). */
  portsOrigin: string;
  /** The address the ports listener is bound to. */
  portsUrl: string;
  /** The domain ingress names live under (`HOST[:PORT]`), or null when names are off. */
  ingressDomain: string | null;
  /** Set on the first start only: the admin key, shown once. */
  adminKey: string | null;
  store: Store;
  /** The team's sidecar hosts: the lifecycle port, and the wire for tests that speak it. */
  denvd: DenvdHosts;
  deployer: Deployer;
  /** Deployments that were running when the server last stopped, now rolled back. */
  recovered: string[];
  /** What the server fetches from for teams. */
  fetchPolicy: FetchPolicy;
  /** Where its files are (the SQLite store, the secret key). */
  dataDir: string;
  /** This replica's id (server_replicas). */
  replicaId: string;
  /**
   * A one-time sign-in link to the admin team's console as an admin (a day to open it): what
   * `denv up` prints, so the person at its terminal reaches the team it made, not a new one.
   */
  signInLink(): Promise<string>;
  close(): Promise<void>;
}

export async function startServer(options: ServerOptions): Promise<RunningServer> {
  // The ingress wildcard from an ACME CA, before anything is opened: a start that cannot have it
  // fails with nothing left running.
  const acmeDomain = options.ingress?.domain?.split(":")[0];
  if (options.acme && !acmeDomain)
    throw new Error("ACME issues the ingress domain's wildcard: give the ingress domain (--ingress-domain)");
  const acme =
    options.acme && acmeDomain ? new AcmeCertificates(options.dataDir, acmeDomain, options.acme) : null;
  const acmeTls = acme ? (await acme.ensure()).tls : null;
  const store = await openStore({
    dataDir: options.dataDir,
    databaseUrl: options.databaseUrl,
    waitMs: options.storeWaitMs,
  });
  const adminKey = await bootstrap(store, options.adminKey);
  const leaseMs = options.leaseMs ?? 15_000;
  // Replicas on one PostgreSQL: each holds some hosts' connections and routes calls for the rest.
  const registry = new ReplicaRegistry(store, {
    deadAfterMs: leaseMs,
    heartbeatMs: Math.min(2000, Math.floor(leaseMs / 4)),
  });
  const secrets = SecretBox.open(options.dataDir);
  const peerKey = linkKey(secrets);
  const denvd = new DenvdHosts(store, {
    waitForHostMs: options.hostWaitMs,
    replicas: { registry, linkKey: peerKey },
  });
  const stacks = denvd.stacks;
  // A host's hello here, or a deployment's change, is word to the other replicas at once.
  const notices = openStoreNotices(options.databaseUrl);
  notices.on("denv_hosts", () => void denvd.refresh());
  await sealStoredText(store, secrets);
  let url = options.publicUrl ?? "";
  const fetchPolicy = FetchPolicy.standard(options.fetchAllow ?? []);
  const provisioner = new Provisioner({
    store,
    secrets,
    serverUrl: () => options.publicUrl ?? url,
    fetchPolicy,
  });
  const validator = new ComposeValidator(options.composeBudget);
  const buildContexts = new BuildContexts(options.dataDir, undefined, options.teamQuotaBytes);
  const metrics = new ServerMetrics({
    hostsConnected: () => denvd.connectedCount(),
    pools: () => poolTotals(store),
    hostFigures: () => hostFigureTotals(store, (id) => stacks.hostConnected(id)),
  });
  let ready = false;
  const listenHost = options.host ?? "127.0.0.1";
  const scheme = options.tls ? "https" : "http";
  const host = options.host && options.host !== "0.0.0.0" ? options.host : "127.0.0.1";
  const tls = options.tls
    ? { cert: readFileSync(options.tls.certPath), key: readFileSync(options.tls.keyPath) }
    : null;
  // Port URLs and ingress names: a listener of their own, bound before the deployments that name
  // it. Its certificate: an ACME wildcard for the ingress domain, a file, or the API's.
  // The deployer is made below (it names this listener): a request reaches it through this.
  let idleOf: Deployer["idle"] | undefined;
  const ports = await PortsListener.open(
    {
      store,
      stacks,
      derive: (label) => secrets.derive(label),
      wake: async (environmentId) => idleOf?.wakeById(environmentId),
    },
    {
      listenHost: options.portsHost ?? listenHost,
      apiHost: host,
      port: options.portsPort,
      tls:
        acmeTls ??
        (options.portsTls
          ? { cert: readFileSync(options.portsTls.certPath), key: readFileSync(options.portsTls.keyPath) }
          : tls),
      portsOrigin: options.portsOrigin,
      publicUrl: options.publicUrl,
      ingress: options.ingress,
    },
  );
  const github = new GitHubApps({ store, secrets, fetchPolicy });
  const deployer = new Deployer({
    github,
    ingress: ports.ingressPhase,
    observer: metrics,
    store,
    stacks,
    lease: { owner: registry.id, ms: leaseMs },
    secrets,
    validator,
    fetchPolicy,
    joinWaitMs: options.joinWaitMs,
    answerWithinMs: options.answerWithinMs,
    provisioner,
    provisionJoinWaitMs: options.provisionJoinWaitMs,
    buildContexts,
  });
  idleOf = deployer.idle;
  deployer.events.relay = (id) => notices.notify("denv_deployments", id);
  notices.on("denv_deployments", (id) => deployer.events.wake(id));
  const admission = new Admission({ store, secrets }, options.admission);
  const replicator = new Replicator({ store, hosts: stacks, secrets, observer: metrics });
  const replicas = new ReplicaKeeper(
    { store, stacks, admission, replicator },
    { lostAfterMs: options.hostWatch?.lostAfterMs, ...options.replicaKeeper },
  );
  const pools = new PoolKeeper({ store, deployer, stacks, admission }, options.pools);
  deployer.onDeployed((d) => {
    if (d.pool !== null)
      void pools.replaceDeclared(d.teamId, d.projectId, d.versionId, d.pool).catch((err) =>
        // The deploy stands; the pool it declared does not fit (or its version went): said here.
        serverLog().warn({ version: d.versionId, error: String(err) }, "x-denv.pool not applied"),
      );
    // x-denv.replicas: the new version's copies are made now, not at the next pass.
    void replicas.kick();
  });
  // A host that (re)connects may have restarted: what it holds now is what its environments are.
  denvd.onLocalHello((hostId) => {
    notices.notify("denv_hosts", hostId);
    void deployer.syncHost(hostId).then(
      (changed) => {
        if (changed.length) serverLog().info({ hostId, changed }, "environment statuses set from their host");
      },
      () => {},
    );
    // A host back (or new) may take the copies a lost one held.
    void replicas.kick();
  });
  // Renewal: looked at twice a day; a new certificate is served from the next handshake on.
  const renewal = acme
    ? setInterval(
        () =>
          void acme.ensure().then(
            ({ tls: next, issued }) => {
              if (!issued) return;
              ports.setCertificate(next);
              serverLog().info({ domain: acmeDomain }, "ingress certificate renewed");
            },
            (err) =>
              serverLog().error(
                { error: String(err) },
                "ingress certificate not renewed; the current one is kept",
              ),
          ),
        options.acme?.checkEveryMs ?? 12 * 3_600_000,
      ).unref()
    : undefined;
  let e2bSweep: NodeJS.Timeout | undefined;
  const idleSweep =
    options.idleSweepMs === 0
      ? undefined
      : setInterval(
          () =>
            void deployer.idle
              .sweep()
              .catch((err) => serverLog().error({ error: String(err) }, "idle sweep failed")),
          options.idleSweepMs ?? 5000,
        ).unref();
  const app = createApp({
    github,
    ...(options.publicUrl ? { serverUrl: () => options.publicUrl as string } : {}),
    portsOrigin: ports.origin,
    ingress: ports.ingressNames,
    store,
    stacks,
    deployer,
    admission,
    replicator,
    replicas,
    pools,
    downloadsDir: options.downloadsDir,
    secrets,
    fetchPolicy,
    rateLimit: options.rateLimit,
    accountRateLimit: options.accountRateLimit,
    metrics,
    isReady: () => ready,
    onE2bSweep: (sweep) => {
      e2bSweep = setInterval(
        () => void sweep().catch((err) => serverLog().error({ error: String(err) }, "E2B sweep failed")),
        options.e2bSweepMs ?? 2000,
      );
    },
    ...(options.keepAliveMs ? { keepAliveMs: options.keepAliveMs } : {}),
  });
  ports.serveEnvdWith(app.fetch);
  const appListener = getRequestListener(app.fetch);
  // Replicas fetch build contexts from each other (peer-contexts.ts); everything else is the app's.
  const listener = (req: IncomingMessage, res: ServerResponse) => {
    if (req.url?.startsWith(CONTEXTS_PATH))
      return void servePeerContext(req, res, buildContexts, peerKey).catch(() => res.destroy());
    // A body refused unread (api/request-bodies.ts) is not waited for once the answer is out: the
    // connection is ended at once (the sender sees the answer, then the end) and dropped a second
    // later, rather than read to its end. (Dropped at once, the answer could be lost: closing a
    // socket with bytes unread resets it.)
    res.once("finish", () => {
      if (!closesUnread(req)) return;
      req.socket.end();
      setTimeout(() => req.socket.destroy(), 1000).unref();
    });
    return appListener(req, res);
  };
  buildContexts.fromPeers = contextsFromPeers(registry, peerKey);
  const server: Server = tls ? createHttpsServer(tls, listener) : createHttpServer(listener);
  // Clients keep connections open between calls; closing an idle one just as a client reuses it
  // resets that request. Idle connections therefore live longer than clients usually keep them.
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  server.on("upgrade", (req, socket, head) => {
    denvd.handleUpgrade(req, socket, head);
  });
  await listen(server, options.port ?? 0, listenHost).catch(async (err) => {
    await ports.close();
    throw err;
  });
  const { port } = server.address() as AddressInfo;
  url = `${scheme}://${host}:${port}`;
  // On SQLite this is the only replica: whatever was running when the last one stopped is its own.
  const exclusive = !options.databaseUrl;
  await registry.start(options.peerUrl ?? url, { exclusive });
  denvd.start();
  const leases = new DeploymentLeases({ store, registry, deployer }, leaseMs);
  const recovered = await leases.takeOver(exclusive);
  leases.start();
  // A replay's forks are its replica's own: they are ended only when no other replica is running.
  if (!(await registry.peers()).length) await recoverReplays({ store, deployer });
  // Fleet-wide passes run on one replica (the oldest alive); requests kick them on any.
  registry.whenLeader(() => {
    pools?.start();
    replicas?.start();
  });
  const expiry = startContextExpiry(store, buildContexts, options.contextExpiry);
  const watch = startHostWatch({ store, hosts: stacks }, options.hostWatch);
  ready = true;
  return {
    url,
    portsOrigin: ports.origin.template,
    portsUrl: ports.url,
    ingressDomain: ports.ingressNames?.domain ?? null,
    adminKey,
    store,
    denvd,
    deployer,
    recovered,
    fetchPolicy,
    dataDir: options.dataDir,
    replicaId: registry.id,
    async signInLink() {
      const team = await adminTeamId(store);
      if (!team) throw new Error("the store has no admin team");
      const link = await createInvitation(store, {
        teamId: team,
        email: null,
        role: "admin",
        createdBy: "denv up",
        origin: url,
      });
      return link.url;
    },
    async close() {
      clearInterval(e2bSweep);
      clearInterval(idleSweep);
      clearInterval(renewal);
      leases.stop();
      denvd.stop();
      await registry.stop();
      await notices.close();
      pools?.stop();
      replicas.stop();
      expiry.stop();
      watch.stop();
      denvd.close();
      await validator.close();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      await ports.close();
      await store.destroy();
    },
  };
}

/** First start: the admin team and key. Later starts: nothing (returns null). */
async function bootstrap(store: Store, adminKey: string | undefined): Promise<string | null> {
  const admin = await adminTeamId(store);
  if (admin) {
    // A key given in the environment is honoured on later starts too, without printing it, and
    // always belongs to the admin team (never to whichever team a query returns first).
    if (adminKey) {
      const known = await findApiKey(store, adminKey);
      if (!known) await createApiKey(store, admin, "admin (from environment)", true, adminKey);
      else if (known.team_id !== admin || known.admin !== 1)
        throw new Error(
          "DENV_ADMIN_KEY is already a key of another team, or not an admin key; choose another",
        );
    }
    return null;
  }
  if (await anyTeam(store))
    throw new Error("the store has teams but no admin team; it was not made by this server");
  const teamId = await createTeam(store, "default", true);
  return createApiKey(store, teamId, "admin", true, adminKey);
}

/** Text stored before it was sealed (an older server's) is sealed now, once. */
async function sealStoredText(store: Store, secrets: SecretBox): Promise<void> {
  const projects = await projectTexts(store);
  for (const p of projects) {
    const plain = (t: string | null) => t !== null && !SecretBox.isSealedText(t);
    if (!plain(p.compose_text) && !plain(p.dotenv_text)) continue;
    await setProjectTexts(store, p.id, {
      compose_text: plain(p.compose_text) ? secrets.sealText(p.compose_text) : p.compose_text,
      dotenv_text: plain(p.dotenv_text) ? secrets.sealText(p.dotenv_text) : p.dotenv_text,
    });
  }
  const versions = await versionSpecTexts(store);
  for (const v of versions) {
    if (SecretBox.isSealedText(v.spec_json)) continue;
    await setVersionSpecText(store, v.id, secrets.sealText(v.spec_json));
  }
}

/** Joins a host to a team through the ordinary path (a fresh join token, then /v1/hosts/join). */
export async function joinLocalHost(
  server: RunningServer,
  teamId: string,
  name: string,
): Promise<{ host_id: string; secret: string }> {
  const { token } = await createJoinToken(server.store, teamId, 60_000);
  const res = await fetch(`${server.url}/v1/hosts/join`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ token, name }),
  });
  if (!res.ok) throw new Error(`the local host could not join: HTTP ${res.status}`);
  return (await res.json()) as { host_id: string; secret: string };
}
