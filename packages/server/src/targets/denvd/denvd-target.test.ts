import assert from "node:assert/strict";
import { test } from "node:test";
import type { GpuInventory } from "@denv/protocol";
import { gpuCapability } from "./denvd-target.ts";

const inventory = (
  mode: GpuInventory["mode"],
  devices: number,
  note: string | null = null,
): GpuInventory => ({
  driver_version: devices ? "550.54" : null,
  devices: Array.from({ length: devices }, (_, i) => ({
    index: i,
    uuid: `GPU-${i}`,
    model: "NVIDIA H100",
    memory_bytes: 80e9,
  })),
  device_nodes: [],
  cdi_devices: [],
  runtime: { nvidia: mode === "nvidia", cdi: mode === "cdi" },
  mode,
  note,
});

test("the GPU cell is what the team's hosts can pass to a container", () => {
  assert.deepEqual(gpuCapability([inventory("cdi", 2), inventory("nvidia", 1), null]), {
    supported: true,
    detail: "3 GPUs on 2 hosts (a service's gpus: placed where they are free)",
  });
  // Devices the engine cannot pass do not count; why is said.
  const none = gpuCapability([inventory("none", 4, "the engine has no nvidia runtime and no CDI specs")]);
  assert.equal(none.supported, false);
  assert.match(none.detail, /^no host of the team can pass a GPU \(the engine has no nvidia runtime/);
  assert.deepEqual(gpuCapability([]), { supported: false, detail: "no host joined yet" });
  assert.equal(gpuCapability([null]).supported, false);
});
