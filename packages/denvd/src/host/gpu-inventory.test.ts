import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { deviceRequestsFor } from "../stack/container-spec.ts";
import { parseNvidiaSmi, readGpuInventory } from "./gpu-inventory.ts";

const SMI = [
  "0, GPU-8a3c2b1e-1111-2222-3333-444455556666, NVIDIA H200, 143771, 580.159.03",
  "1, GPU-9b4d3c2f-1111-2222-3333-444455556666, NVIDIA H200, 143771, 580.159.03",
  "not a gpu line",
  "2, ; rm -rf /, evil, 1, 1",
].join("\n");

function fixture(files: Record<string, string>, devs: string[] = []): string {
  const root = mkdtempSync(join(tmpdir(), "denv-gpu-fixture-"));
  mkdirSync(join(root, "dev"));
  for (const d of devs) writeFileSync(join(root, "dev", d), "");
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(root, path, ".."), { recursive: true });
    writeFileSync(join(root, path), text);
  }
  return root;
}

test("nvidia-smi's query output: each GPU's index, UUID, model, memory and the driver; other lines skipped", () => {
  const gpus = parseNvidiaSmi(SMI);
  assert.deepEqual(gpus, [
    {
      index: 0,
      uuid: "GPU-8a3c2b1e-1111-2222-3333-444455556666",
      model: "NVIDIA H200",
      memory_bytes: 143771 * 1024 * 1024,
      driver_version: "580.159.03",
    },
    {
      index: 1,
      uuid: "GPU-9b4d3c2f-1111-2222-3333-444455556666",
      model: "NVIDIA H200",
      memory_bytes: 143771 * 1024 * 1024,
      driver_version: "580.159.03",
    },
  ]);
});

test("a fixture host with GPUs and the toolkit's hook: two GPUs passed by the nvidia driver", async () => {
  const root = fixture(
    { "nvidia-smi.csv": SMI, "engine.json": JSON.stringify({ runtimes: ["runc"], nvidia_hook: true }) },
    ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"],
  );
  try {
    const inv = await readGpuInventory({ root });
    assert.equal(inv.devices.length, 2);
    assert.equal(inv.driver_version, "580.159.03");
    assert.deepEqual(inv.device_nodes, ["/dev/nvidia0", "/dev/nvidia1"]);
    assert.equal(inv.mode, "nvidia");
    assert.equal(inv.note, null);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test("CDI: a specification's devices are listed and preferred where the engine reads CDI; a hostile spec lists nothing", async () => {
  const spec =
    "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n  - name: '0'\n  - name: all\n  - name: 'x; rm -rf /'\n";
  const root = fixture({
    "nvidia-smi.csv": SMI,
    "etc/cdi/nvidia.yaml": spec,
    "var/run/cdi/broken.yaml": "kind: [\n",
    "var/run/cdi/alias.yaml": "a: &a [*a]\n",
    "engine.json": JSON.stringify({ runtimes: ["runc"], cdi_spec_dirs: ["/etc/cdi", "/var/run/cdi"] }),
  });
  try {
    const inv = await readGpuInventory({ root });
    assert.deepEqual(inv.cdi_devices, ["nvidia.com/gpu=0", "nvidia.com/gpu=all"]);
    assert.equal(inv.mode, "cdi");
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test("GPUs the engine cannot pass, device nodes without nvidia-smi, and nothing at all each say why", async () => {
  const noHook = fixture({ "nvidia-smi.csv": SMI, "engine.json": JSON.stringify({ runtimes: ["runc"] }) });
  const nodesOnly = fixture({}, ["nvidia0"]);
  const bare = fixture({});
  try {
    const a = await readGpuInventory({ root: noHook });
    assert.equal(a.mode, "none");
    assert.match(a.note ?? "", /install the NVIDIA Container Toolkit/);
    const b = await readGpuInventory({ root: nodesOnly });
    assert.equal(b.devices.length, 0);
    assert.match(b.note ?? "", /1 NVIDIA device nodes but no nvidia-smi/);
    const c = await readGpuInventory({ root: bare });
    assert.deepEqual(c, {
      driver_version: null,
      devices: [],
      device_nodes: [],
      cdi_devices: [],
      runtime: { nvidia: false, cdi: false },
      mode: "none",
      note: "no NVIDIA GPU (no nvidia-smi, no /dev/nvidiaN)",
    });
  } finally {
    for (const r of [noHook, nodesOnly, bare]) rmSync(r, { recursive: true, force: true });
  }
});

test("a link in a CDI directory is not followed, even to a valid specification", async () => {
  const root = fixture({
    "nvidia-smi.csv": SMI,
    "elsewhere/nvidia.yaml": "kind: nvidia.com/gpu\ndevices:\n  - name: '0'\n",
  });
  try {
    mkdirSync(join(root, "etc", "cdi"), { recursive: true });
    symlinkSync(join(root, "elsewhere", "nvidia.yaml"), join(root, "etc", "cdi", "linked.yaml"));
    const inv = await readGpuInventory({ root });
    assert.deepEqual(inv.cdi_devices, []);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test("the engine's device requests: given GPUs by UUID, a count, all, and CDI names", () => {
  const r = {
    driver: "nvidia",
    count: 1 as const,
    device_ids: null,
    capabilities: ["gpu", "utility"],
    options: {},
  };
  assert.deepEqual(deviceRequestsFor(undefined, { assigned: null, mode: "nvidia" }), []);
  assert.deepEqual(deviceRequestsFor(r, { assigned: ["GPU-b"], mode: "nvidia" }), [
    { driver: "nvidia", count: 0, deviceIds: ["GPU-b"], capabilities: [["gpu", "utility"]], options: {} },
  ]);
  assert.deepEqual(deviceRequestsFor(r, { assigned: null, mode: "nvidia" }), [
    { driver: "nvidia", count: 1, deviceIds: [], capabilities: [["gpu", "utility"]], options: {} },
  ]);
  assert.deepEqual(
    deviceRequestsFor({ ...r, count: "all" }, { assigned: null, mode: "nvidia" })[0]?.count,
    -1,
  );
  assert.deepEqual(deviceRequestsFor(r, { assigned: ["GPU-b"], mode: "cdi" }), [
    { driver: "cdi", count: 0, deviceIds: ["nvidia.com/gpu=GPU-b"], capabilities: [], options: {} },
  ]);
  assert.deepEqual(deviceRequestsFor({ ...r, count: "all" }, { assigned: null, mode: "cdi" })[0]?.deviceIds, [
    "nvidia.com/gpu=all",
  ]);
});
