import { join } from "node:path";
import { parseBytes } from "@denv/spec/units";
import type { Command } from "commander";
import { printJson, UsageError } from "../output.ts";

/**
 * `denv up`: the embedded default. A server on SQLite and a local denvd on this machine, joined to
 * it, in one process. Ctrl-C stops both; environments and data stay for the next `denv up`.
 */
export function registerUp(program: Command): void {
  program
    .command("up")
    .description("Start a local server (SQLite) and a denvd on this machine joined to it")
    .option("--port <port>", "port for the server", "7070")
    .option("--data-dir <dir>", "where the server and the local denvd keep their state", "/var/lib/denv")
    .option("--storage <kind>", "the local denvd's storage: btrfs (a loop-mounted pool) or dir", "btrfs")
    .option(
      "--pool-size <size>",
      "the btrfs pool's size when it is made (e.g. 20g; default: nine tenths of the disk's free space, at most 64g)",
    )
    .option(
      "--allow-fetch <hosts>",
      "more hosts (host, host:port or *.domain, comma-separated) the server may fetch from besides the public ones and the local registry: a registry, git server or provider API on this machine or network",
    )
    .option("--json", "print {server, api_key} as JSON once ready")
    .addHelpText(
      "after",
      `
Examples:
  denv up                      # then, in another shell: denv login --server http://127.0.0.1:7070 --api-key <key>
  denv up --storage dir --port 7171
  DENV_LOG_LEVEL=info denv up  # the server's log lines at info too (deployments, hosts)`,
    )
    .action(
      async (o: {
        port: string;
        dataDir: string;
        storage: string;
        poolSize?: string;
        allowFetch?: string;
        json?: boolean;
      }) => {
        if (!["btrfs", "dir"].includes(o.storage)) throw new UsageError("--storage is btrfs or dir");
        const poolBytes = o.poolSize === undefined ? undefined : parseBytes(o.poolSize);
        if (o.poolSize !== undefined && (!poolBytes || poolBytes < 1024 ** 3))
          throw new UsageError(`--pool-size ${o.poolSize} is not a size of at least 1g (e.g. 20g)`);
        // Its terminal is a person's, not a log collector's: the server's lines at warn and above
        // unless DENV_LOG_LEVEL asks for more (read as the server's log is made, at this import).
        process.env.DENV_LOG_LEVEL ??= "warn";
        const { parseFetchAllow, startServer } = await import("@denv/server");
        const { BtrfsDriver, DirDriver, Denvd, DockerRuntime, Sidecar, defaultAgentBinary } = await import(
          "@denv/denvd"
        );
        const { localHostSecret } = await import("../up-secret.ts");
        const serverDir = join(o.dataDir, "server");
        const stateDir = join(o.dataDir, "denvd");
        const server = await startServer({
          dataDir: serverDir,
          port: Number(o.port),
          // Port URLs on the next port, on "localhost": another origin and another site than the
          // console's 127.0.0.1, so a sandbox's page can reach nothing of the console.
          portsPort: Number(o.port) === 0 ? 0 : Number(o.port) + 1,
          adminKey: process.env.DENV_ADMIN_KEY,
          // One person's machine: its own local registry is a source like the public ones.
          fetchAllow: ["127.0.0.1:5000", "localhost:5000", ...parseFetchAllow(o.allowFetch)],
        });
        // The local host joins through the same path as any other: a token, then a per-host secret,
        // remembered in the state directory so the next `denv up` is the same host.
        const secret = await localHostSecret(server, stateDir);
        const storage =
          o.storage === "dir"
            ? new DirDriver(join(stateDir, "dir"))
            : new BtrfsDriver({ stateDir, ...(poolBytes ? { imageSizeBytes: poolBytes } : {}) });
        const denvd = await Denvd.open({
          stateDir,
          storage,
          runtime: new DockerRuntime(),
          agentBinary: defaultAgentBinary(),
        });
        const sidecar = new Sidecar({ serverUrl: server.url, secret, denvd });
        sidecar.start();
        await sidecar.ready;
        const key = server.adminKey ?? process.env.DENV_ADMIN_KEY ?? null;
        // The console's "Create an account" makes a new team: this team is reached by a link.
        const signIn = await server.signInLink();
        if (o.json)
          printJson({
            server: server.url,
            console_sign_in: signIn,
            ports_origin: server.portsOrigin,
            ingress_domain: server.ingressDomain,
            api_key: key,
            storage: storage.kind,
          });
        else {
          process.stdout.write(
            `denv is up: server ${server.url}, port URLs on ${server.portsOrigin}, names under ${server.ingressDomain ?? "(none)"}, local host joined (storage ${storage.kind})\n`,
          );
          process.stdout.write(
            `console: ${signIn}\n  (a one-time sign-in link to this team, valid a day: open it to make your account in it; \`denv console\` prints another)\n`,
          );
          if (key)
            process.stdout.write(`API key: ${key}\n  denv login --server ${server.url} --api-key ${key}\n`);
          else process.stdout.write("API key: printed by the first `denv up` (or set DENV_ADMIN_KEY)\n");
          process.stdout.write("Ctrl-C stops it.\n");
        }
        await new Promise<void>((resolve) => {
          process.once("SIGINT", resolve);
          process.once("SIGTERM", resolve);
        });
        await sidecar.stop();
        await server.close();
        process.stdout.write("denv stopped\n");
      },
    );
}
