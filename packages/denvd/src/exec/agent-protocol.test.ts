import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import {
  agentHeaderPath,
  decodeRecord,
  encodeRequest,
  FLAGS,
  FS_OP,
  renderAgentHeader,
} from "./agent-protocol.ts";

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

test("no request or record is laid out by hand: the C reads and writes them through the generated header, the TypeScript through the table", () => {
  const agent = join(agentHeaderPath(), "..");
  for (const f of readdirSync(agent).filter((n) => n.endsWith(".c") && n !== "agent-io.c")) {
    const c = readFileSync(join(agent, f), "utf8");
    assert.doesNotMatch(c, /\bread_str\(|\bread_list(_n)?\(/, `${f} reads a request's fields by hand`);
    assert.doesNotMatch(c, /send_frame\([^;]*FRAME_OUT_STATUS, &/, `${f} writes a status record by hand`);
  }
  const executor = readFileSync(join(import.meta.dirname, "agent-executor.ts"), "utf8");
  // A frame's head (type, then its length at offset 1) is the framing's, not a record's.
  assert.doesNotMatch(executor, /read(Big)?U?Int\d+LE\((?!1\))/, "agent-executor.ts reads a record by hand");
  assert.doesNotMatch(executor, /REQUEST\./, "agent-executor.ts writes a request's mode by hand");
});

test("a request the TypeScript encodes is what the C reads, and a record the C writes is what the TypeScript decodes", () => {
  const agent = join(agentHeaderPath(), "..");
  const dir = mkdtempSync(join(tmpdir(), "agent-layout-"));
  try {
    // Reads one request (fsop or exec) off stdin with the generated readers and answers with an
    // entry record and a put_status record made from its fields by the generated writers.
    writeFileSync(
      join(dir, "echo.c"),
      `#include "denv-agent.h"
int main(void) {
  uint32_t first;
  char buf[8192];
  if (read_u32(0, &first)) return 2;
  struct entry_record e = {.size = 1099511627781ull, .mtime = -7, .nsec = 123};
  if (first == MODE_FSOP) {
    struct fsop_request r;
    if (read_fsop_request(0, &r)) return 3;
    e.type = (uint8_t)r.op, e.mode = r.flags, e.uid = r.depth, e.gid = 0;
    e.name = r.path, e.link = r.to, e.owner = r.user, e.group = "fsop";
  } else {
    struct exec_request r;
    if (read_exec_request(0, first, &r)) return 4;
    e.type = 9, e.mode = r.flags, e.uid = r.argv_count, e.gid = r.env_count;
    e.name = r.argv[r.argv_count - 1], e.link = r.env[0], e.owner = r.user, e.group = r.cwd;
  }
  int n = put_entry_record(buf, sizeof buf, &e);
  if (n < 0 || write_full(1, buf, (size_t)n)) return 5;
  struct put_status_record p = {.status = -3, .entries = 77, .bytes = 5000000000ull};
  n = put_put_status_record(buf, sizeof buf, &p);
  return n < 0 || write_full(1, buf, (size_t)n) ? 6 : 0;
}
`,
    );
    execFileSync("gcc", [
      "-O1",
      "-I",
      agent,
      "-o",
      join(dir, "echo"),
      join(dir, "echo.c"),
      join(agent, "agent-io.c"),
    ]);
    const ask = (request: Buffer) => {
      const out = execFileSync(join(dir, "echo"), { input: request });
      const entry = decodeRecord("entry", out);
      assert.ok(entry);
      const entryBytes =
        33 +
        [entry.name, entry.link, entry.owner, entry.group].reduce((n, s) => n + 4 + Buffer.byteLength(s), 0);
      return { entry, status: decodeRecord("put_status", out.subarray(entryBytes)) };
    };
    const fsop = ask(
      encodeRequest("fsop", {
        op: FS_OP.RENAME,
        path: "/srv/å b",
        to: "/srv/c",
        user: "1000:1000",
        flags: FLAGS.FSOP_DEEP,
        depth: 3,
      }),
    );
    assert.deepEqual(fsop.entry, {
      type: FS_OP.RENAME,
      mode: FLAGS.FSOP_DEEP,
      uid: 3,
      gid: 0,
      size: 1099511627781n,
      mtime: -7n,
      nsec: 123,
      name: "/srv/å b",
      link: "/srv/c",
      owner: "1000:1000",
      group: "fsop",
    });
    assert.deepEqual(fsop.status, { status: -3, entries: 77, bytes: 5000000000n });
    const exec = ask(
      encodeRequest("exec", {
        argv: ["sh", "-c", "echo hi"],
        env: ["A=1", "B=2"],
        cwd: "/work",
        user: "agent",
        flags: FLAGS.EXEC_HOME | FLAGS.EXEC_CLEAN_ENV,
        rows: 40,
        cols: 120,
      }),
    );
    assert.equal(exec.entry.uid, 3);
    assert.equal(exec.entry.gid, 2);
    assert.equal(exec.entry.mode, 3);
    assert.equal(exec.entry.name, "echo hi");
    assert.equal(exec.entry.link, "A=1");
    assert.equal(exec.entry.owner, "agent");
    assert.equal(exec.entry.group, "/work");
    // A record cut short is not one.
    assert.equal(decodeRecord("entry", Buffer.alloc(20)), null);
    assert.equal(decodeRecord("put_status", Buffer.alloc(15)), null);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
