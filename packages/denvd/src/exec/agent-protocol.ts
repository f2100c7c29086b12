/**
 * The agent channel's numbers, in one table: request modes, frame types each way, the files
 * operations and the status codes a files request ends with. denvd's TypeScript reads them from
 * here; denv-agent's C reads them from agent/denv-agent-protocol.h, which this module writes
 * (`node packages/denvd/src/exec/agent-protocol.ts`); agent-protocol.test.ts fails when the two
 * differ. The layout of each request is described in agent/denv-agent.c.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";

/** The version the agent says in its hello; denvd and the agent are built from one tree. */
export const AGENT_PROTOCOL_VERSION = 2;

/** The first u32 of a request: an exec's argc, or one of these. */
export const REQUEST = {
  PORT: 0xffffffff,
  FILES: 0xfffffffe,
  PUT: 0xfffffffd,
  FSOP: 0xfffffffc,
} as const;

/** A frame's type byte from denvd to the agent: stdin (or a put's tar) and its end, and kill. */
export const FRAME_IN = {
  DATA: 0,
  END: 1,
  KILL: 9,
} as const;

/**
 * A frame's type byte from the agent to denvd: output, the error message and the final status
 * (an exec's exit status, or a files request's FS status), a files operation's stat entries, and
 * whether a mkdir made the directory.
 */
export const FRAME_OUT = {
  STDOUT: 1,
  STDERR: 2,
  STATUS: 3,
  ENTRIES: 4,
  CREATED: 5,
} as const;

/** The files operations of an FSOP request. */
export const FS_OP = {
  STAT: 1,
  LIST: 2,
  MKDIR: 3,
  REMOVE: 4,
  RENAME: 5,
} as const;

/** What a files request ended with: each kind of failure its own, never the kernel's words alone. */
export const FS_STATUS = {
  OK: 0,
  NOT_FOUND: 1,
  PERMISSION: 2,
  IS_DIR: 3,
  NOT_DIR: 4,
  EXISTS: 5,
  NO_SPACE: 6,
  INVALID: 7,
  OTHER: 8,
  NOT_EMPTY: 9,
  NO_USER: 10,
  LINK: 11,
} as const;

/**
 * An exec request whose program is this name runs one of the host agent's btrfs operations in its
 * handler (agent/agent-btrfs.c) instead of a program: host mode only; a container's agent has none.
 */
export const BTRFS_BUILTIN = "denv-agent:btrfs";

const hex = (n: number) => (n > 0xffff ? `0x${n.toString(16)}u` : String(n));

/** The C header the agent is compiled with, from the table above. */
export function renderAgentHeader(): string {
  const block = (prefix: string, table: Record<string, number>) =>
    Object.entries(table).map(([k, v]) => `#define ${prefix}${k} ${hex(v)}`);
  return `${[
    "/* Generated from packages/denvd/src/exec/agent-protocol.ts: do not edit; run",
    " * `node packages/denvd/src/exec/agent-protocol.ts` after changing the table there. */",
    "#ifndef DENV_AGENT_PROTOCOL_H",
    "#define DENV_AGENT_PROTOCOL_H",
    "",
    `#define PROTOCOL_VERSION ${AGENT_PROTOCOL_VERSION}`,
    "",
    ...block("MODE_", REQUEST),
    "",
    ...block("FRAME_IN_", FRAME_IN),
    "",
    ...block("FRAME_OUT_", FRAME_OUT),
    "",
    ...block("OP_", FS_OP),
    "",
    ...block("FS_", FS_STATUS),
    "",
    `#define BTRFS_BUILTIN ${JSON.stringify(BTRFS_BUILTIN)}`,
    "",
    "#endif",
  ].join("\n")}\n`;
}

/** Where the header lives in the tree (a function: the bundled denvd has no module directory). */
export function agentHeaderPath(): string {
  return join(import.meta.dirname, "..", "..", "agent", "denv-agent-protocol.h");
}

if (import.meta.main) {
  writeFileSync(agentHeaderPath(), renderAgentHeader());
  process.stdout.write(`wrote ${agentHeaderPath()}\n`);
}
