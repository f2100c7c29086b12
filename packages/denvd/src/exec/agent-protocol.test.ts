import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { agentHeaderPath, renderAgentHeader } from "./agent-protocol.ts";

test("the agent's C header is the table's (regenerate: node packages/denvd/src/exec/agent-protocol.ts)", () => {
  assert.equal(readFileSync(agentHeaderPath(), "utf8"), renderAgentHeader());
});

test("neither side writes a frame type as a bare number", () => {
  const agent = join(agentHeaderPath(), "..");
  for (const f of readdirSync(agent).filter((n) => n.endsWith(".c"))) {
    const c = readFileSync(join(agent, f), "utf8");
    assert.doesNotMatch(c, /send_frame\([^,]+,\s*\d/, `${f} sends a frame by number`);
  }
  const executor = readFileSync(join(import.meta.dirname, "agent-executor.ts"), "utf8");
  assert.doesNotMatch(
    executor,
    /type === \d|frame\(\d/,
    "agent-executor.ts compares or sends frame types by number",
  );
});
