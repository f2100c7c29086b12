// What the `denv` and `denvd` commands start with. denv's TypeScript runs on Node 24 through its
// type stripping, with no build step. This is plain JavaScript so that it also starts on an older
// node (these machines ship Node 20 on PATH): there it re-runs the command under the Node 24 that
// scripts/ensure-node.sh cached, and passes the exit code through.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * Runs `main(argv)` of the module at mainUrl on Node 24, re-running the command's own script
 * (process.argv[1]) under Node 24 when this node is older.
 */
export async function launch(command, mainUrl) {
  const major = Number(process.versions.node.split(".")[0]);
  if (major >= 24) {
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
  const child = spawnSync(node, [process.argv[1], ...process.argv.slice(2)], { stdio: "inherit" });
  process.exit(child.status ?? 128 + (child.signal === "SIGINT" ? 2 : 15));
}
