import assert from "node:assert/strict";
import { test } from "node:test";
import { DenvError } from "@denv/protocol";
import type { ContainerRuntime } from "../runtime/container-runtime.ts";
import { NetworkAllocator } from "./network-allocator.ts";

/** The two calls the allocator makes, over an in-memory list of subnets. */
function engine(taken: string[], options: { overlapOnce?: string } = {}) {
  const made: string[] = [];
  let lists = 0;
  let overlap = options.overlapOnce;
  const runtime = {
    networkSubnets: async () => {
      lists++;
      return [...taken, ...made];
    },
    createNetwork: async (spec: { subnet?: string }) => {
      // The engine's create takes a turn of the event loop at least: callers overlap in it.
      await new Promise((r) => setImmediate(r));
      const s = spec.subnet as string;
      if (s === overlap) {
        overlap = undefined;
        taken.push(s);
        throw new DenvError("conflict", "in use", { details: { subnet_overlap: true } });
      }
      if (made.includes(s) || taken.includes(s)) throw new Error(`subnet ${s} given twice`);
      made.push(s);
      return `net-${made.length}`;
    },
  } as unknown as ContainerRuntime;
  return { runtime, made, lists: () => lists };
}

test("concurrent creates get distinct subnets, from one reading of what is used", async () => {
  const e = engine(["198.18.0.0/24"]);
  const a = new NetworkAllocator(e.runtime, "198.18.0.0/16");
  const ids = await Promise.all(
    Array.from({ length: 20 }, (_, i) => a.create({ name: `n${i}`, internal: true, labels: {} })),
  );
  assert.equal(new Set(ids).size, 20);
  assert.equal(new Set(e.made).size, 20);
  assert.ok(!e.made.includes("198.18.0.0/24"), "a subnet the engine uses is never picked");
  assert.equal(e.lists(), 1);
});

test("a subnet someone else took meanwhile is refused by the engine, and another is picked", async () => {
  const e = engine([], { overlapOnce: "198.19.0.0/24" });
  const a = new NetworkAllocator(e.runtime, "198.19.0.0/16", () => 0);
  await a.create({ name: "n", internal: true, labels: {} });
  assert.deepEqual(e.made, ["198.19.1.0/24"]);
  assert.equal(e.lists(), 2, "read again after the overlap");
});

test("a full pool is unavailable, said plainly", async () => {
  const e = engine(["198.18.200.0/24"]);
  const a = new NetworkAllocator(e.runtime, "198.18.200.0/24");
  await assert.rejects(a.create({ name: "n", internal: true, labels: {} }), /no free subnet left/);
});

test("subnets to avoid are never picked, though free (a live fork's parent's), and a pool of only those is full", async () => {
  const e = engine([]);
  const a = new NetworkAllocator(e.runtime, "198.18.0.0/22", () => 0);
  await a.create({ name: "n", internal: true, labels: {} }, ["198.18.0.0/24", "198.18.1.0/24"]);
  assert.deepEqual(e.made, ["198.18.2.0/24"]);
  await assert.rejects(
    a.create({ name: "m", internal: true, labels: {} }, ["198.18.0.0/23", "198.18.3.0/24"]),
    /no free subnet left/,
  );
});
