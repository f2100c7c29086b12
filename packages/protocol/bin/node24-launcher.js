// What the `denv` and `denvd` commands start with. denv's TypeScript runs on Node 24 through its
// type stripping, with no build step. This is plain JavaScript so that it also starts on an older
// node (these machines ship Node 20 on PATH): there it re-runs the command under the Node 24 that
// scripts/ensure-node.sh cached, and passes the exit code through.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
// A namespace import: enableCompileCache is not in the Node 20 this file must also start on.
import * as nodeModule from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * V8 flags for the processes that run for days and carry byte streams: `denv server`, `denv up`
 * and `denvd run`. A young generation of at most 2 MiB per semi-space (V8's default grows it to
 * 16): what a request or a stream's frames allocate dies young, and a bigger young generation only
 * keeps more of it resident between collections. Measured over a 3 GiB file each way through the
 * API (bench/README.md, issue 42): the server's peak RSS 303 → 269 MiB and denvd's 238 → 215, with
 * the transfer rates within their spread.
 */
const LONG_RUNNING_FLAGS = ["--max-semi-space-size=2"];

/** Whether this invocation is one of the long-running processes (its first argument is the subcommand). */
export function longRunning(command, args) {
  const sub = args.find((a) => !a.startsWith("-"));
  return command === "denvd" ? sub === "run" : sub === "server" || sub === "up";
}

/**
 * The flags this process should run with and does not: the user's own node flags win, given on
 * node's command line or in NODE_OPTIONS, spelled with dashes or underscores (V8 takes both).
 */
export function missingFlags(command, args, execArgv, nodeOptions = "") {
  if (!longRunning(command, args)) return [];
  const name = (flag) => flag.split("=")[0].replace(/_/g, "-");
  const given = [...execArgv, ...nodeOptions.split(/\s+/).filter(Boolean)].map(name);
  return LONG_RUNNING_FLAGS.filter((f) => !given.includes(name(f)));
}

/**
 * Runs `main(argv)` of the module at mainUrl on Node 24, re-running the command's own script
 * (process.argv[1]) under Node 24 when this node is older. A long-running command re-executes
 * itself once with LONG_RUNNING_FLAGS (execve: the same process id, nothing left waiting).
 */
export async function launch(command, mainUrl) {
  const major = Number(process.versions.node.split(".")[0]);
  const args = process.argv.slice(2);
  const flags = missingFlags(command, args, process.execArgv, process.env.NODE_OPTIONS);
  if (major >= 24) {
    if (flags.length && typeof process.execve === "function") {
      try {
        process.execve(process.execPath, [
          process.execPath,
          ...process.execArgv,
          ...flags,
          process.argv[1],
          ...args,
        ]);
      } catch (err) {
        // Only a tuning: a process that cannot re-execute itself runs as it is.
        process.stderr.write(`${command}: running without ${flags.join(" ")} (${err.message})\n`);
      }
    }
    // The compiled code and the stripped TypeScript kept on disk (NODE_COMPILE_CACHE's directory,
    // else node-compile-cache in the temporary directory; NODE_DISABLE_COMPILE_CACHE=1 turns it
    // off): `denv --version` then takes 0.21 s of CPU instead of 0.46.
    nodeModule.enableCompileCache?.();
    const { main } = await import(mainUrl);
    process.exitCode = await main(process.argv.slice(2));
    return;
  }
  const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
  const version = readFileSync(join(root, ".node-version"), "utf8").trim();
  const cache = process.env.DENV_NODE_CACHE ?? `/var/cache/denv/node-${version}`;
  const node = process.env.DENV_NODE ?? join(cache, "node_modules", "node", "bin", "node");
  if (!existsSync(node)) {
    process.stderr.write(
      `${command} needs Node 24 (this is Node ${process.versions.node}). Run \`bash scripts/prepare.sh\` ` +
        "from the denv checkout to install it, or put Node 24 first on PATH.\n",
    );
    process.exit(1);
  }
  const child = spawnSync(node, [...flags, process.argv[1], ...args], { stdio: "inherit" });
  process.exit(child.status ?? 128 + (child.signal === "SIGINT" ? 2 : 15));
}
