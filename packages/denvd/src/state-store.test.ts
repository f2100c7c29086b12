import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { StateStore } from "./state-store.ts";

test("a state file from before stacks had their name is read: its environments are the stacks", async () => {
  const dir = await mkdtemp(join(tmpdir(), "denvd-state-"));
  try {
    const stack = { id: "env_0123456789ab", name: "old", status: "running", containers: {}, datasets: {} };
    await writeFile(
      join(dir, "state.json"),
      JSON.stringify({
        ownerId: "abcdef012345",
        environments: { [stack.id]: stack },
        versions: { ver_0123456789ab: { id: "ver_0123456789ab", environmentId: stack.id, snapshots: {} } },
      }),
    );
    const store = await StateStore.open(dir);
    assert.equal(store.ownerId, "abcdef012345");
    assert.equal(store.stack("env_0123456789ab")?.name, "old");
    assert.equal(store.version("ver_0123456789ab")?.stackId, "env_0123456789ab");
    assert.equal(store.stack("constructor"), undefined);
    // The next write keeps the records under their new names.
    await store.deleteVersion("ver_0123456789ab");
    const written = JSON.parse(await readFile(join(dir, "state.json"), "utf8"));
    assert.deepEqual(Object.keys(written.stacks), ["env_0123456789ab"]);
    assert.equal(written.environments, undefined);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
