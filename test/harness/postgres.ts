/**
 * A PostgreSQL cluster of its own for a test, from Debian's postgresql: initdb as user postgres
 * under /var/lib/denv-test, listening on a free loopback port only.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { freePort } from "./net.ts";

const pgBin = (() => {
  const versions = existsSync("/usr/lib/postgresql") ? readdirSync("/usr/lib/postgresql").sort() : [];
  const v = versions.at(-1);
  return v ? `/usr/lib/postgresql/${v}/bin` : null;
})();

export interface PostgresCluster {
  url: string;
  /** Stops it for good and removes its files. */
  stop: () => void;
  /** `pg_ctl restart -m fast`, as an operator would: every connection is ended, then it is back. */
  restart: () => void;
  /** `pg_ctl stop -m fast`: the database away until `start`. */
  pause: () => void;
  start: () => void;
}

export async function startPostgresCluster(): Promise<PostgresCluster> {
  if (!pgBin) throw new Error("PostgreSQL is not installed (the set-up installs Debian's postgresql)");
  const root = "/var/lib/denv-test";
  const dir = join(root, `pg-${randomBytes(4).toString("hex")}`);
  mkdirSync(dir, { recursive: true });
  // User postgres must pass through the test root, which whoever made it first decided: a denvd
  // making its state directory's parents makes them 0700 (its agent sockets' directory), and a
  // run that began with one left initdb "Permission denied".
  chmodSync(root, 0o755);
  execFileSync("chown", ["postgres:postgres", dir]);
  const port = await freePort();
  const asPg = (...args: string[]) =>
    execFileSync("runuser", ["-u", "postgres", "--", ...args], { stdio: "pipe" });
  asPg(`${pgBin}/initdb`, "-D", join(dir, "data"), "-A", "trust", "-U", "postgres");
  const ctl = (...args: string[]) =>
    asPg(
      `${pgBin}/pg_ctl`,
      "-D",
      join(dir, "data"),
      "-w",
      "-l",
      join(dir, "log"),
      "-o",
      `-k ${dir} -p ${port} -c listen_addresses=127.0.0.1`,
      ...args,
    );
  ctl("start");
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    restart: () => ctl("-m", "fast", "restart"),
    pause: () => ctl("-m", "fast", "stop"),
    start: () => ctl("start"),
    stop: () => {
      spawnSync(
        "runuser",
        ["-u", "postgres", "--", `${pgBin}/pg_ctl`, "-D", join(dir, "data"), "-m", "immediate", "stop"],
        { stdio: "ignore" },
      );
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
