/**
 * denvd as one executable (Node's single executable application, built by scripts/build-denvd.sh):
 * this module is the bundle's entry. denv-agent travels inside the executable as an asset; it is
 * written out once per version, root-only, where containers can bind-mount it from.
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DENVD_VERSION } from "./host/sidecar.ts";
import { main } from "./main.ts";

function extractAgent(): void {
  let sea: typeof import("node:sea") | undefined;
  try {
    sea = process.getBuiltinModule("node:sea") as typeof import("node:sea");
  } catch {
    return;
  }
  if (!sea?.isSea() || process.env.DENVD_AGENT) return;
  let data: ArrayBuffer;
  try {
    data = sea.getAsset("denv-agent");
  } catch {
    return; // an executable built without the agent: exec goes through the engine
  }
  const dir = join(
    process.env.DENVD_AGENT_DIR ?? "/var/lib/denvd/agent",
    DENVD_VERSION.replace(/[^\w.+-]/g, "_"),
  );
  const path = join(dir, "denv-agent");
  const bytes = Buffer.from(data);
  if (!existsSync(path) || !readFileSync(path).equals(bytes)) {
    mkdirSync(dir, { recursive: true, mode: 0o755 });
    writeFileSync(`${path}.tmp`, bytes, { mode: 0o755 });
    chmodSync(`${path}.tmp`, 0o755);
    renameSync(`${path}.tmp`, path);
  }
  process.env.DENVD_AGENT = path;
}

// `ps` and `pgrep denvd` show the program, not the runtime it carries.
process.title = "denvd";
const argv = process.argv.slice(2);
if (argv[0] === "run") extractAgent();
void main(argv).then((code) => {
  process.exitCode = code;
});
