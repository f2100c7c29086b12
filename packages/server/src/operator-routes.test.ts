import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { ComposeValidator } from "@denv/spec";
import { createApp } from "./app.ts";
import { SecretBox } from "./clouds/secret-box.ts";
import { Deployer } from "./deployments/deployer.ts";
import { FetchPolicy } from "./fetch-policy.ts";
import { PortsOrigin } from "./ports-origin.ts";
import { openStore } from "./store/open-store.ts";
import { DenvdHosts } from "./targets/denvd/denvd-hosts.ts";

test("/readyz says ready only once the server started and while its store answers; /metrics is 404 without metrics", async () => {
  const dir = mkdtempSync(join(tmpdir(), "denv-operator-"));
  const store = await openStore(join(dir, "store"));
  const hub = new DenvdHosts(store, { waitForHostMs: 100 });
  const validator = new ComposeValidator({ workers: 1 });
  try {
    const secrets = SecretBox.open(join(dir, "store"));
    const fetchPolicy = new FetchPolicy([]);
    const deployer = new Deployer({
      store,
      stacks: hub.stacks,
      secrets,
      validator,
      fetchPolicy,
      joinWaitMs: 100,
    });
    let started = false;
    const app = createApp({
      portsOrigin: new PortsOrigin("http://localhost:1"),
      store,
      stacks: hub.stacks,
      deployer,
      secrets,
      fetchPolicy,
      log: () => {},
      isReady: () => started,
    });
    const get = async (path: string) => {
      const res = await app.request(path);
      return { status: res.status, data: (await res.json()) as any };
    };
    assert.deepEqual(await get("/healthz"), { status: 200, data: { status: "ok" } });
    const starting = await get("/readyz");
    assert.equal(starting.status, 503);
    assert.deepEqual(starting.data.checks, { store: "ok", server: "starting (recovering deployments)" });
    started = true;
    assert.equal((await get("/readyz")).status, 200);
    // A store that no longer answers: not ready, saying which check fails.
    await store.destroy();
    const broken = await get("/readyz");
    assert.equal(broken.status, 503);
    assert.match(broken.data.checks.store, /^failing: /);
    assert.equal(broken.data.status, "not_ready");
    const none = await get("/metrics");
    assert.equal(none.status, 404);
  } finally {
    hub.close();
    await validator.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
