/**
 * Ingress (a published port reached by name over HTTPS through the ports listener) beside its peer
 * in the same run: `GET /health` of a sandbox's HTTP service by its `{port}-{id}` name, TLS from a
 * certificate this bench makes, with the environment's token, vs the same request straight to the
 * container's address (plain HTTP on the Docker bridge, what a client on the host would do without
 * denv). The client by name keeps its TLS connection alive (the relay opens a connection to the
 * service per request); the direct client opens one per request, as the relay does. Names are
 * resolved by SNI and Host, not DNS.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { Agent as HttpsAgent, request as httpsRequest } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Docker from "dockerode";
import { log, ms, openBenchRig } from "./bench-rig.ts";
import { type Metric, metricOf, shuffled } from "./bench-stats.ts";

const docker = new Docker();
const ECHO = "127.0.0.1:5000/denv/openenv-echo:0.1";

function get(
  send: typeof httpRequest,
  options: Record<string, unknown>,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = send({ ...options, method: "GET" }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => {
        body += c;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

export async function ingressBench(quick: boolean): Promise<Record<string, Metric>> {
  const dir = mkdtempSync(join(tmpdir(), "denv-ingress-bench-"));
  execFileSync(
    "openssl",
    [
      "req",
      "-x509",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-keyout",
      "key.pem",
      "-out",
      "cert.pem",
      "-days",
      "1",
    ].concat(["-subj", "/CN=denv.test", "-addext", "subjectAltName=DNS:*.denv.test"]),
    { cwd: dir, stdio: "ignore" },
  );
  const rig = await openBenchRig("ingress", {
    serverOptions: {
      portsTls: { certPath: join(dir, "cert.pem"), keyPath: join(dir, "key.pem") },
      ingress: { domain: "denv.test" },
    },
  });
  const results: Record<string, Metric> = {};
  try {
    const { api, server, denvd } = rig;
    const sb = await api("POST", "/v1/sandboxes", { image: ECHO, user: "1000:1000", egress: "allow" });
    const id = sb.id as string;
    const token = (await api("GET", `/v1/envs/${id}/ingress`)).token as string;
    const name = `8000-${id.replace(/^env_/, "")}.denv.test`;
    const ports = new URL(server.portsUrl);
    const tlsAgent = new HttpsAgent({ keepAlive: true, maxSockets: 1 });
    const viaName = () =>
      get(httpsRequest as unknown as typeof httpRequest, {
        host: ports.hostname,
        port: Number(ports.port),
        servername: name,
        ca: readFileSync(join(dir, "cert.pem")),
        agent: tlsAgent,
        path: "/health",
        headers: { host: name, "denv-ingress-token": token },
      });
    // The container's own address on its network, as the host sees it (a sandbox with egress has
    // a bridge network the host reaches; one without has no network at all).
    const stack = (
      await server.store
        .selectFrom("environments")
        .select("stack_id")
        .where("id", "=", id)
        .executeTakeFirstOrThrow()
    ).stack_id as string;
    const info = await docker.getContainer(denvd.stack(stack).containers.main as string).inspect();
    const address = Object.values(info.NetworkSettings.Networks).find((n) => n.IPAddress)?.IPAddress;
    if (!address) throw new Error("the sandbox's container has no address");
    // A connection per request, closed by the answer: what the relay itself does to the service.
    // (Kept alive, this Python server's answers wait out the host's 40 ms delayed ACK.)
    const direct = () =>
      get(httpRequest, {
        host: address,
        port: 8000,
        agent: false,
        path: "/health",
        headers: { connection: "close" },
      });
    // The server in the image takes a moment to listen: wait for it through both paths.
    for (let i = 0; ; i++) {
      const [a, b] = await Promise.all([viaName().catch(() => null), direct().catch(() => null)]);
      if (a?.status === 200 && b?.status === 200) break;
      if (i > 600) throw new Error(`the service did not answer: ${a?.status} ${b?.status}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const named: number[] = [];
    const plain: number[] = [];
    for (let i = 0; i < (quick ? 100 : 400); i++)
      for (const who of shuffled(["name", "direct"], i + 1)) {
        const t = performance.now();
        const r = who === "name" ? await viaName() : await direct();
        (who === "name" ? named : plain).push(performance.now() - t);
        if (r.status !== 200 || !r.body.includes("healthy")) throw new Error(`${who}: ${r.status} ${r.body}`);
      }
    results.ingress_https_p50_ms = metricOf(
      named,
      "ms",
      "GET /health of a sandbox's service by its ingress name over HTTPS (keep-alive, token checked)",
      2,
    );
    results.ingress_direct_p50_ms = metricOf(
      plain,
      "ms",
      "the same GET straight to the container's address over HTTP (a connection per request)",
      2,
    );
    log(`ingress: ${ms(named)} ms by name over HTTPS, ${ms(plain)} ms to the container's address`);
    tlsAgent.destroy();
    await api("DELETE", `/v1/envs/${id}`);
  } finally {
    await rig.close();
    rmSync(dir, { recursive: true, force: true });
  }
  return results;
}
