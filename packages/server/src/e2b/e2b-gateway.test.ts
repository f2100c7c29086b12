import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { SecretBox } from "../clouds/secret-box.ts";
import { RateLimiter } from "../rate-limit.ts";
import { openStore } from "../store/open-store.ts";
import { createApiKey, createTeam } from "../store/team-store.ts";
import { createE2bGateway } from "./e2b-gateway.ts";

test("the control plane's own answers count against the key's rate limit: past it, 429 and nothing read", async () => {
  const dir = mkdtempSync(join(tmpdir(), "denv-e2b-"));
  const store = await openStore(join(dir, "store"));
  try {
    let nowMs = 0;
    const limiter = new RateLimiter({ perSecond: 1, burst: 3, clock: () => nowMs });
    let v1Calls = 0;
    const { app } = createE2bGateway({
      store,
      secrets: SecretBox.open(join(dir, "store")),
      limiter,
      v1: async () => {
        v1Calls++;
        return Response.json({ error: { code: "internal", message: "not reached" } }, { status: 500 });
      },
    });
    const key = await createApiKey(store, await createTeam(store, "t"), "k", false);
    const other = await createApiKey(store, await createTeam(store, "u"), "k", false);
    const list = (k: string) => app.request("/v2/sandboxes", { headers: { "x-api-key": k } });
    for (let i = 0; i < 3; i++) assert.equal((await list(key)).status, 200);
    const over = await list(key);
    assert.equal(over.status, 429);
    assert.match(((await over.json()) as { message: string }).message, /rate limit; retry in \d+ ms/);
    // A create past the limit is refused before its body is read or /v1 is asked.
    const create = await app.request("/v2/sandboxes", {
      method: "POST",
      headers: { "x-api-key": key, "content-type": "application/json" },
      body: JSON.stringify({ templateID: "ver_000000000001" }),
    });
    assert.equal(create.status, 429);
    assert.equal(v1Calls, 0);
    // Another key has its own bucket; this one refills with time.
    assert.equal((await list(other)).status, 200);
    nowMs += 1000;
    assert.equal((await list(key)).status, 200);
  } finally {
    await store.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
});
