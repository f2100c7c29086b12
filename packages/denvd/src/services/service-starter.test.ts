import assert from "node:assert/strict";
import { test } from "node:test";
import { AGENT_BIN } from "../stack/container-spec.ts";
import { isServiceStarter } from "./service-starter.ts";

test("the engine's container init and denv's agent are starters; the service's own command is not", () => {
  assert.equal(isServiceStarter(["runc", "init"]), true, "runc init as containerd's shim starts it");
  assert.equal(isServiceStarter(["/usr/sbin/runc", "init"]), true, "by its full path");
  assert.equal(isServiceStarter([AGENT_BIN, "init", "/s", "1000", "h", "--", "sleep"]), true);
  assert.equal(isServiceStarter(["sleep", "infinity"]), false);
  assert.equal(isServiceStarter(["runc"]), false, "runc with no init is some other program");
  assert.equal(isServiceStarter(["/bin/sh", "-c", "runc init"]), false);
  assert.equal(isServiceStarter(["postgres: checkpointer"]), false, "a rewritten title is the service");
});
