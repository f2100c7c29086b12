/**
 * The host's GPUs, as denvd reports them in its hello: each NVIDIA GPU's index, UUID, model and
 * memory (from `nvidia-smi --query-gpu`), the device nodes (/dev/nvidiaN), the CDI devices a
 * specification lists (/etc/cdi, /var/run/cdi), and how this engine can pass them to a container:
 * CDI device names where a specification lists them and the engine reads CDI, the engine's `nvidia`
 * device driver where the NVIDIA Container Toolkit's hook is installed, or not at all (said why).
 * `root` reads all of it from a directory laid out like the host instead (a test's fixture):
 * nvidia-smi.csv for the query's output, dev/, etc/cdi/, and engine.json for the engine's part.
 */
import { execFile } from "node:child_process";
import { lstat, readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import type { GpuInventory } from "@denv/protocol";
import { parse as parseYaml } from "yaml";

export type { GpuInventory } from "@denv/protocol";

/** The query denvd asks nvidia-smi, in this order of fields. */
export const NVIDIA_SMI_ARGS = [
  "--query-gpu=index,uuid,name,memory.total,driver_version",
  "--format=csv,noheader,nounits",
];
const CDI_DIRS = ["etc/cdi", "var/run/cdi"];
const MAX_GPUS = 64;

export interface GpuInventoryOptions {
  /** A directory laid out like the host (a test's fixture); absent: the host itself. */
  root?: string;
  /** The engine's answer to GET /info (Runtimes, CDISpecDirs); absent with a fixture root. */
  engineInfo?: () => Promise<{ runtimes: string[]; cdiSpecDirs: string[] }>;
}

export async function readGpuInventory(options: GpuInventoryOptions = {}): Promise<GpuInventory> {
  const root = options.root ?? "/";
  const fixture = options.root !== undefined;
  const smi = fixture
    ? await readFile(join(root, "nvidia-smi.csv"), "utf8").catch(() => null)
    : await runNvidiaSmi();
  const devices = smi === null ? [] : parseNvidiaSmi(smi);
  const deviceNodes = (await readdir(join(root, "dev")).catch(() => [] as string[]))
    .filter((n) => /^nvidia\d+$/.test(n))
    .sort((a, b) => Number(a.slice(6)) - Number(b.slice(6)))
    .map((n) => `/dev/${n}`);
  const cdiDevices: string[] = [];
  for (const dir of CDI_DIRS) cdiDevices.push(...(await cdiDevicesIn(join(root, dir))));
  const engine = fixture
    ? await readFile(join(root, "engine.json"), "utf8")
        .then(
          (t) => JSON.parse(t) as { runtimes?: string[]; cdi_spec_dirs?: string[]; nvidia_hook?: boolean },
        )
        .catch(() => ({}) as { runtimes?: string[]; cdi_spec_dirs?: string[]; nvidia_hook?: boolean })
    : await (options.engineInfo?.() ?? Promise.resolve({ runtimes: [], cdiSpecDirs: [] })).then(
        async (i) => ({
          runtimes: i.runtimes,
          cdi_spec_dirs: i.cdiSpecDirs,
          nvidia_hook: await hasNvidiaHook(),
        }),
        () => ({ runtimes: [], cdi_spec_dirs: [], nvidia_hook: false }),
      );
  const nvidiaRuntime = (engine.runtimes ?? []).includes("nvidia") || engine.nvidia_hook === true;
  const cdi =
    (engine.cdi_spec_dirs ?? []).length > 0 && cdiDevices.some((d) => d.startsWith("nvidia.com/gpu="));
  const mode = devices.length === 0 ? "none" : cdi ? "cdi" : nvidiaRuntime ? "nvidia" : "none";
  const note =
    devices.length === 0
      ? smi === null
        ? deviceNodes.length
          ? `${deviceNodes.length} NVIDIA device nodes but no nvidia-smi to read them with: no GPUs are offered`
          : "no NVIDIA GPU (no nvidia-smi, no /dev/nvidiaN)"
        : "nvidia-smi lists no GPU"
      : mode === "none"
        ? "the engine can pass no GPU to a container: install the NVIDIA Container Toolkit (its runtime hook) or enable CDI"
        : null;
  return {
    driver_version: devices[0]?.driver_version ?? null,
    devices: devices.map(({ driver_version: _, ...d }) => d),
    device_nodes: deviceNodes,
    cdi_devices: cdiDevices.sort(),
    runtime: { nvidia: nvidiaRuntime, cdi },
    mode,
    note,
  };
}

/** `0, GPU-…, NVIDIA H200, 143771, 580.159.03` per line; a line that is not that is skipped. */
export function parseNvidiaSmi(
  text: string,
): Array<GpuInventory["devices"][number] & { driver_version: string }> {
  const out = [];
  for (const line of text.split("\n").slice(0, MAX_GPUS)) {
    const f = line.split(",").map((s) => s.trim());
    if (f.length < 5) continue;
    const [index, uuid, model, mib, driver] = f as [string, string, string, string, string];
    if (!/^\d+$/.test(index) || !/^(GPU|MIG)-[0-9a-fA-F-]{8,64}$/.test(uuid)) continue;
    out.push({
      index: Number(index),
      uuid,
      model: model.slice(0, 100),
      memory_bytes: /^\d+$/.test(mib) ? Number(mib) * 1024 * 1024 : null,
      driver_version: driver.slice(0, 40),
    });
  }
  return out;
}

/** The device names a directory's CDI specifications list: `KIND=NAME` (nvidia.com/gpu=0). */
async function cdiDevicesIn(dir: string): Promise<string[]> {
  const names: string[] = [];
  for (const file of await readdir(dir).catch(() => [] as string[])) {
    if (!/\.(ya?ml|json)$/.test(file)) continue;
    try {
      // Regular files only, never through a link, and bounded.
      const st = await lstat(join(dir, file));
      if (!st.isFile() || st.size > 4 * 1024 * 1024) continue;
      const text = await readFile(join(dir, file), "utf8");
      const spec = parseYaml(text) as { kind?: unknown; devices?: Array<{ name?: unknown }> };
      if (typeof spec?.kind !== "string" || !Array.isArray(spec.devices)) continue;
      for (const d of spec.devices.slice(0, 256))
        if (typeof d?.name === "string" && /^[\w.:-]{1,128}$/.test(d.name))
          names.push(`${spec.kind}=${d.name}`);
    } catch {
      // A specification that does not parse lists nothing.
    }
  }
  return names;
}

function runNvidiaSmi(): Promise<string | null> {
  return new Promise((resolve) => {
    execFile("nvidia-smi", NVIDIA_SMI_ARGS, { timeout: 15_000, maxBuffer: 1024 * 1024 }, (err, stdout) =>
      resolve(err ? null : stdout),
    );
  });
}

/** The engine registers its `nvidia` device driver when the toolkit's hook is on its PATH. */
function hasNvidiaHook(): Promise<boolean> {
  return new Promise((resolve) => {
    execFile("sh", ["-c", "command -v nvidia-container-runtime-hook"], { timeout: 5000 }, (err) =>
      resolve(!err),
    );
  });
}
