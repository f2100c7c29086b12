import assert from "node:assert/strict";
import { test } from "node:test";
import { gpusWanted } from "./gpu-request.ts";
import { validateCompose } from "./validate-compose.ts";

const service = (body: string) =>
  `services:\n  trainer:\n    image: nvidia/cuda:12.9.0-base-ubuntu22.04\n${body}`;
const resolved = (text: string) => {
  const r = validateCompose(text, { env: {} });
  return { r, gpus: r.ok ? r.spec.services.trainer?.gpus : undefined };
};
const errors = (text: string) => {
  const r = validateCompose(text, { env: {} });
  return r.ok ? [] : r.errors.map((e) => `${e.path}: ${e.message}`);
};

// The examples of Compose's documentation (docs.docker.com/compose/how-tos/gpu-support).
test("Compose's documented GPU examples resolve to one request each", () => {
  const one = resolved(
    service(
      "    command: nvidia-smi\n    deploy:\n      resources:\n        reservations:\n          devices:\n            - driver: nvidia\n              count: 1\n              capabilities: [gpu]\n",
    ),
  );
  assert.equal(one.r.ok, true, JSON.stringify(one.r));
  assert.deepEqual(one.gpus, {
    driver: "nvidia",
    count: 1,
    device_ids: null,
    capabilities: ["gpu"],
    options: {},
  });
  // No reservation warning any more: the devices are reserved for real.
  assert.deepEqual(
    one.r.warnings.filter((w) => w.path.includes("reservations")),
    [],
  );

  const ids = resolved(
    service(
      "    deploy:\n      resources:\n        reservations:\n          devices:\n          - driver: nvidia\n            device_ids: ['0', '3']\n            capabilities: [gpu]\n",
    ),
  );
  assert.deepEqual(ids.gpus, {
    driver: "nvidia",
    count: null,
    device_ids: ["0", "3"],
    capabilities: ["gpu"],
    options: {},
  });

  const all = resolved(
    service(
      "    deploy:\n      resources:\n        reservations:\n          devices:\n            - capabilities: [gpu]\n",
    ),
  );
  assert.deepEqual(all.gpus?.count, "all", "no count and no device_ids: every GPU, as Compose does");

  assert.deepEqual(resolved(service("    gpus: all\n")).gpus, {
    driver: "nvidia",
    count: "all",
    device_ids: null,
    capabilities: ["gpu"],
    options: {},
  });
  assert.deepEqual(
    resolved(service("    gpus:\n      - count: 2\n        options: { virtualization: false }\n")).gpus,
    {
      driver: "nvidia",
      count: 2,
      device_ids: null,
      capabilities: ["gpu"],
      options: { virtualization: "false" },
    },
  );
});

test("Compose's rules: count with device_ids, a long form without capabilities, and what denv cannot pass through are refused where they are", () => {
  assert.deepEqual(
    errors(
      service(
        "    deploy:\n      resources:\n        reservations:\n          devices:\n            - count: 1\n              device_ids: ['0']\n              capabilities: [gpu]\n",
      ),
    ),
    [
      "services.trainer.deploy.resources.reservations.devices[0].device_ids: count and device_ids cannot both be set: give one",
    ],
  );
  assert.match(
    errors(
      service(
        "    deploy:\n      resources:\n        reservations:\n          devices:\n            - count: 1\n",
      ),
    )[0] ?? "",
    /devices\[0\]\.capabilities: capabilities is required/,
  );
  assert.match(
    errors(service("    gpus:\n      - driver: 3dfx\n        count: 2\n"))[0] ?? "",
    /driver 3dfx: denv passes NVIDIA GPUs/,
  );
  assert.match(errors(service("    gpus: 2\n"))[0] ?? "", /gpus is "all" or a list/);
  assert.match(
    errors(
      service(
        "    gpus: all\n    deploy:\n      resources:\n        reservations:\n          devices:\n            - capabilities: [gpu]\n",
      ),
    )[0] ?? "",
    /gpus and deploy\.resources\.reservations\.devices both ask/,
  );
  assert.match(
    errors(
      service(
        "    deploy:\n      resources:\n        reservations:\n          devices:\n            - capabilities: [tpu]\n",
      ),
    )[0] ?? "",
    /without gpu: denv passes GPUs through, no other devices/,
  );
  assert.match(
    errors(service("    gpus:\n      - count: 0\n"))[0] ?? "",
    /count is all or a whole number from 1/,
  );
  assert.match(
    errors(service("    gpus:\n      - device_ids: ['$(rm -rf /)']\n"))[0] ?? "",
    /device_ids is a list of GPU indexes or UUIDs/,
  );
  assert.match(
    errors(service("    gpus:\n      - count: 1\n      - count: 1\n"))[0] ?? "",
    /one device request per service/,
  );
  // Memory and CPU reservations still only warn: limits are what cap a service.
  const r = validateCompose(
    service("    deploy:\n      resources:\n        reservations:\n          memory: 1g\n"),
    { env: {} },
  );
  assert.equal(r.ok, true);
  assert.match(r.warnings.map((w) => w.message).join("\n"), /reservations\.memory is accepted and ignored/);
});

test("how many GPUs a request holds on a host", () => {
  const base = { driver: "nvidia", capabilities: ["gpu"], options: {} };
  assert.equal(gpusWanted({ ...base, count: 2, device_ids: null }, 8), 2);
  assert.equal(gpusWanted({ ...base, count: "all", device_ids: null }, 8), 8);
  assert.equal(gpusWanted({ ...base, count: null, device_ids: ["0", "3"] }, 8), 2);
});
