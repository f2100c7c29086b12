/**
 * The agent channel, described once: request modes, frame types each way, the files operations,
 * the status codes a files request ends with, the flags, and the layout of every request and of
 * every record the agent answers with. denvd's TypeScript reads and writes them through this
 * module (encodeRequest, decodeRecord); denv-agent's C through agent/denv-agent-protocol.h, which
 * this module writes (`node packages/denvd/src/exec/agent-protocol.ts`): the structs, their
 * readers and writers. agent-protocol.test.ts fails when the two differ or either side writes a
 * layout by hand.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";

/**
 * The version the agent says in its hello. denvd and the agent are built from one tree, but a
 * container started by an older denvd keeps its older agent across denvd's upgrade: denvd then
 * speaks that agent's version (a field added since is not sent, a feature it lacks is refused).
 */
export const AGENT_PROTOCOL_VERSION = 3;

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
  /** A terminal's new size (a winsize record), for an exec with a terminal. */
  RESIZE: 2,
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

/** The bits of a request's flags word. */
export const FLAGS = {
  /** exec: set HOME from the user's passwd entry (as `docker exec` does when the container sets none). */
  EXEC_HOME: 1,
  /** exec: start from the request's variables alone, none of the container's (graders). */
  EXEC_CLEAN_ENV: 2,
  /**
   * exec: on a terminal (a pseudo-terminal of rows x cols, the command's session's controlling
   * one): its output comes as stdout alone, and stdin's end is the terminal's end-of-file (^D).
   */
  EXEC_TTY: 4,
  /** put: the tar's owners are kept (the request is root's). */
  PUT_KEEP_OWNERS: 1,
  /** fsop: mkdir makes missing parents; remove removes a directory's contents. */
  FSOP_DEEP: 1,
} as const;

/**
 * How a field travels, little-endian: integers of their width; `str` a u32 length and that many
 * bytes (no terminator); `strs` a u32 count and that many `str`.
 */
export type Wire = "u8" | "u32" | "i32" | "u64" | "i64" | "str" | "strs";
/** A field: its name, its wire form, and the protocol version that added it (none: from the start). */
type Field = readonly [name: string, wire: Wire, since?: number];

/**
 * Each request after its first word, which is its mode (REQUEST) or, for an exec, argv's count:
 * an exec's first field (`strs`) takes its count from that word.
 */
export const REQUESTS = {
  exec: {
    mode: null,
    fields: [
      ["argv", "strs"],
      /** "K=V" */
      ["env", "strs"],
      /** "": the container's working directory. */
      ["cwd", "str"],
      /** "name|uid[:group|gid]"; "": the agent's own (root). */
      ["user", "str"],
      ["flags", "u32"],
      /** The terminal's size with FLAG_EXEC_TTY (0: 24 x 80); since protocol 3. */
      ["rows", "u32", 3],
      ["cols", "u32", 3],
    ],
  },
  /** Connect to 127.0.0.1:port in the container's network namespace; one status byte, then bytes. */
  port: { mode: "PORT", fields: [["port", "u32"]] },
  /** A tar of the path, in FRAME_OUT.STDOUT frames. */
  files: {
    mode: "FILES",
    fields: [
      ["path", "str"],
      ["user", "str"],
    ],
  },
  /** A tar to extract at the path, in FRAME_IN.DATA frames; answered by a put_status record. */
  put: {
    mode: "PUT",
    fields: [
      ["path", "str"],
      ["user", "str"],
      ["flags", "u32"],
    ],
  },
  /** One files operation (FS_OP); `to` is rename's destination, `depth` list's. */
  fsop: {
    mode: "FSOP",
    fields: [
      ["op", "u32"],
      ["path", "str"],
      ["to", "str"],
      ["user", "str"],
      ["flags", "u32"],
      ["depth", "u32"],
    ],
  },
} as const satisfies Record<string, { mode: keyof typeof REQUEST | null; fields: readonly Field[] }>;

/**
 * The first word of what `denv-agent relay` (an environment's egress gateway) writes on each
 * connection it hands denvd, before the caller's bytes: a relay_hello record.
 */
export const RELAY_MAGIC = 0x45564e44;

/** The records the agent answers with, each a frame's payload. */
export const RECORDS = {
  /** An egress relay's first bytes on a connection: RELAY_MAGIC, the caller's IPv4 address (as a number) and port. */
  relay_hello: [
    ["magic", "u32"],
    ["addr", "u32"],
    ["port", "u32"],
  ],
  /** FRAME_OUT.STATUS of an exec (its exit status, 128+N for signal N) or a files request (FS_STATUS). */
  status: [["status", "i32"]],
  /** FRAME_IN.RESIZE: a terminal's new size. */
  winsize: [
    ["rows", "u32"],
    ["cols", "u32"],
  ],
  /** FRAME_OUT.STATUS of a put. */
  put_status: [
    ["status", "i32"],
    ["entries", "u32"],
    ["bytes", "u64"],
  ],
  /** FRAME_OUT.ENTRIES: one file of a stat or list (type: ENTRY_TYPES' index). */
  entry: [
    ["type", "u8"],
    ["mode", "u32"],
    ["uid", "u32"],
    ["gid", "u32"],
    ["size", "u64"],
    ["mtime", "i64"],
    ["nsec", "u32"],
    ["name", "str"],
    ["link", "str"],
    ["owner", "str"],
    ["group", "str"],
  ],
} as const satisfies Record<string, readonly Field[]>;

/** An entry record's type byte, by index. */
export const ENTRY_TYPES = ["file", "directory", "symlink", "other"] as const;

type WireValue<W> = W extends "strs"
  ? string[]
  : W extends "str"
    ? string
    : W extends "u64" | "i64"
      ? bigint
      : number;
type Values<F extends readonly Field[]> = { [P in F[number] as P[0]]: WireValue<P[1]> };
export type RequestValues<K extends keyof typeof REQUESTS> = Values<(typeof REQUESTS)[K]["fields"]>;
export type RecordValues<K extends keyof typeof RECORDS> = Values<(typeof RECORDS)[K]>;

const WIDTH = { u8: 1, u32: 4, i32: 4, u64: 8, i64: 8 } as const;

function encodeField(wire: Wire, value: unknown, out: Buffer[]): void {
  const int = (n: 1 | 4 | 8, write: (b: Buffer) => void) => {
    const b = Buffer.alloc(n);
    write(b);
    out.push(b);
  };
  const str = (s: string) => {
    const body = Buffer.from(s);
    int(4, (b) => b.writeUInt32LE(body.length));
    out.push(body);
  };
  if (wire === "u8") int(1, (b) => b.writeUInt8(value as number));
  else if (wire === "u32") int(4, (b) => b.writeUInt32LE((value as number) >>> 0));
  else if (wire === "i32") int(4, (b) => b.writeInt32LE(value as number));
  else if (wire === "u64") int(8, (b) => b.writeBigUInt64LE(value as bigint));
  else if (wire === "i64") int(8, (b) => b.writeBigInt64LE(value as bigint));
  else if (wire === "str") str(value as string);
  else {
    int(4, (b) => b.writeUInt32LE((value as string[]).length));
    for (const s of value as string[]) str(s);
  }
}

/**
 * A request's bytes: its mode word (none for an exec: argv's count is its first word), then its
 * fields, those an agent of `agentVersion` reads (a field added since is left out).
 */
export function encodeRequest<K extends keyof typeof REQUESTS>(
  kind: K,
  values: RequestValues<K>,
  agentVersion = AGENT_PROTOCOL_VERSION,
): Buffer {
  const layout = REQUESTS[kind];
  const out: Buffer[] = [];
  if (layout.mode) encodeField("u32", REQUEST[layout.mode], out);
  for (const [name, wire, since] of layout.fields as readonly Field[])
    if ((since ?? 0) <= agentVersion) encodeField(wire, (values as Record<string, unknown>)[name], out);
  return Buffer.concat(out);
}

/** A record's bytes (what denvd sends the agent: a terminal's size). */
export function encodeRecord<K extends keyof typeof RECORDS>(kind: K, values: RecordValues<K>): Buffer {
  const out: Buffer[] = [];
  for (const [name, wire] of RECORDS[kind] as readonly Field[])
    encodeField(wire, (values as Record<string, unknown>)[name], out);
  return Buffer.concat(out);
}

/** A record the agent sent, read by its layout; null when the bytes are not one (cut short). */
export function decodeRecord<K extends keyof typeof RECORDS>(kind: K, b: Buffer): RecordValues<K> | null {
  const values: Record<string, unknown> = {};
  let off = 0;
  for (const [name, wire] of RECORDS[kind] as readonly Field[]) {
    if (wire === "str") {
      if (off + 4 > b.length) return null;
      const len = b.readUInt32LE(off);
      if (off + 4 + len > b.length) return null;
      values[name] = b.subarray(off + 4, off + 4 + len).toString("utf8");
      off += 4 + len;
      continue;
    }
    if (wire === "strs") return null; // the agent answers with no lists
    const width = WIDTH[wire];
    if (off + width > b.length) return null;
    values[name] =
      wire === "u8"
        ? b.readUInt8(off)
        : wire === "u32"
          ? b.readUInt32LE(off)
          : wire === "i32"
            ? b.readInt32LE(off)
            : wire === "u64"
              ? b.readBigUInt64LE(off)
              : b.readBigInt64LE(off);
    off += width;
  }
  return values as RecordValues<K>;
}

const C_TYPE = { u8: "uint8_t", u32: "uint32_t", i32: "int32_t", u64: "uint64_t", i64: "int64_t" } as const;

/** A request's struct and its reader (the mode word already read). */
function cRequest(kind: string, layout: { mode: string | null; fields: readonly Field[] }): string[] {
  const members = layout.fields.flatMap(([name, wire]) =>
    wire === "str"
      ? [`  char *${name};`]
      : wire === "strs"
        ? [`  uint32_t ${name}_count;`, `  char **${name};`]
        : [`  ${C_TYPE[wire]} ${name};`],
  );
  const reads = layout.fields.map(([name, wire], i) =>
    wire === "str"
      ? `  if (!(r->${name} = read_str(fd))) return -1;`
      : wire === "strs"
        ? layout.mode === null && i === 0
          ? `  r->${name}_count = first;\n  if (!(r->${name} = read_list_n(fd, first))) return -1;`
          : `  if (!(r->${name} = read_list(fd, &r->${name}_count))) return -1;`
        : wire === "u32"
          ? `  if (read_u32(fd, &r->${name})) return -1;`
          : `  if (read_full(fd, &r->${name}, sizeof r->${name})) return -1;`,
  );
  const lead = layout.mode === null ? "uint32_t first, " : "";
  return [
    `struct ${kind}_request {`,
    ...members,
    "};",
    `/* The rest of ${layout.mode ? `a MODE_${layout.mode}` : "an exec"} request${layout.mode === null ? " (first: argv's count, its first word)" : ""}: 0, or -1 when it is cut short or too large. */`,
    `static inline int read_${kind}_request(int fd, ${lead}struct ${kind}_request *r) {`,
    ...reads.flatMap((l) => l.split("\n")),
    "  return 0;",
    "}",
    "",
  ];
}

/** A record's struct and its writer into a buffer (its length, or -1 when it does not fit). */
function cRecord(kind: string, fields: readonly Field[]): string[] {
  const members = fields.map(([name, wire]) =>
    wire === "str" ? `  const char *${name};` : `  ${C_TYPE[wire as keyof typeof C_TYPE]} ${name};`,
  );
  const writes = fields.flatMap(([name, wire]) =>
    wire === "str"
      ? [
          `  len = (uint32_t)strlen(v->${name});`,
          `  if (off + 4 + (size_t)len > room) return -1;`,
          "  memcpy(buf + off, &len, 4), off += 4;",
          `  memcpy(buf + off, v->${name}, len), off += len;`,
        ]
      : [
          `  if (off + sizeof v->${name} > room) return -1;`,
          `  memcpy(buf + off, &v->${name}, sizeof v->${name}), off += sizeof v->${name};`,
        ],
  );
  const hasStr = fields.some(([, w]) => w === "str");
  // A record of integers alone can be read back in C too (what denvd sends the agent in a frame).
  const reader = hasStr
    ? []
    : [
        `/* One ${kind} record from buf: 0, or -1 when len holds less than one. */`,
        `static inline int get_${kind}_record(const char *buf, size_t len, struct ${kind}_record *v) {`,
        "  size_t off = 0;",
        ...fields.flatMap(([name]) => [
          `  if (off + sizeof v->${name} > len) return -1;`,
          `  memcpy(&v->${name}, buf + off, sizeof v->${name}), off += sizeof v->${name};`,
        ]),
        "  return 0;",
        "}",
        "",
      ];
  return [
    `struct ${kind}_record {`,
    ...members,
    "};",
    `/* One ${kind} record's bytes in buf: their length, or -1 when they do not fit in room. */`,
    `static inline int put_${kind}_record(char *buf, size_t room, const struct ${kind}_record *v) {`,
    "  size_t off = 0;",
    ...(hasStr ? ["  uint32_t len;"] : []),
    ...writes,
    "  return (int)off;",
    "}",
    "",
    ...reader,
  ];
}

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
    "#include <stddef.h>",
    "#include <stdint.h>",
    "#include <string.h>",
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
    ...block("FLAG_", FLAGS),
    "",
    `#define BTRFS_BUILTIN ${JSON.stringify(BTRFS_BUILTIN)}`,
    `#define RELAY_MAGIC ${hex(RELAY_MAGIC)}`,
    "",
    "/* agent-io.c's readers, which the request readers below use. */",
    "int read_full(int fd, void *buf, size_t n);",
    "int read_u32(int fd, uint32_t *v);",
    "char *read_str(int fd);",
    "char **read_list_n(int fd, uint32_t count);",
    "char **read_list(int fd, uint32_t *count);",
    "",
    ...Object.entries(REQUESTS).flatMap(([k, l]) => cRequest(k, l)),
    ...Object.entries(RECORDS).flatMap(([k, f]) => cRecord(k, f)),
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
