/**
 * Rules of the source tree, checked on its files: no import cycle among a package's modules (type
 * imports count: a cycle of types is two modules that cannot be read apart), no hand-written
 * module over MAX_LINES lines (generated ones, `*.gen.ts`, are left out), the server's
 * database reached through `store/` alone (a query written anywhere else is a team's scope that
 * can be forgotten there), and the server's HTTP layer (`api/`) a leaf that only the composition
 * root reaches into: what routes call lives below them, where the other surfaces call it too.
 */
import assert from "node:assert/strict";
import { glob, readFile } from "node:fs/promises";
import { dirname, join, normalize, resolve } from "node:path";
import { test } from "node:test";

const ROOT = resolve(import.meta.dirname, "../..");
const SOURCES = ["packages/*/src/**/*.ts", "packages/*/bin/*.js"];
const MAX_LINES = 600;

async function sourceFiles(): Promise<Map<string, string>> {
  const files = new Map<string, string>();
  for (const pattern of SOURCES)
    for await (const f of glob(pattern, { cwd: ROOT, exclude: (p) => p.includes("node_modules") }))
      if (!/\.test\.ts$|\.d\.ts$/.test(f)) files.set(f, await readFile(join(ROOT, f), "utf8"));
  return files;
}

/** Each module's relative imports and re-exports (type-only included) that name another module. */
export function importGraph(files: Map<string, string>): Map<string, string[]> {
  const edge = /^\s*(?:import|export)\b[^;]*?\bfrom\s*["'](\.{1,2}\/[^"']+)["']/gms;
  const graph = new Map<string, string[]>();
  for (const [f, text] of files) {
    const deps: string[] = [];
    for (const m of text.matchAll(edge)) {
      const to = normalize(join(dirname(f), m[1] as string));
      if (files.has(to) && to !== f) deps.push(to);
    }
    graph.set(f, deps);
  }
  return graph;
}

/** The graph's cycles: its strongly connected parts of more than one module (Tarjan's). */
export function cyclesOf(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (v: string) => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) as number, low.get(w) as number));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v) as number, index.get(w) as number));
    }
    if (low.get(v) === index.get(v)) {
      const part: string[] = [];
      let w: string;
      do {
        w = stack.pop() as string;
        onStack.delete(w);
        part.push(w);
      } while (w !== v);
      if (part.length > 1) cycles.push(part.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return cycles;
}

test("the cycle finder finds a cycle through type imports and re-exports, and none in a chain", () => {
  const files = new Map([
    ["p/a.ts", 'import { b } from "./b.ts";'],
    ["p/b.ts", 'import type {\n  C,\n} from "./sub/c.ts";'],
    ["p/sub/c.ts", 'export { a } from "../a.ts";'],
    ["p/d.ts", 'import { a } from "./a.ts";'],
  ]);
  assert.deepEqual(cyclesOf(importGraph(files)), [["p/a.ts", "p/b.ts", "p/sub/c.ts"]]);
  files.set("p/sub/c.ts", "export const a = 1;");
  assert.deepEqual(cyclesOf(importGraph(files)), []);
});

test("no import cycle among the packages' modules", async () => {
  const cycles = cyclesOf(importGraph(await sourceFiles()));
  assert.deepEqual(cycles, [], cycles.map((c) => c.join(" → ")).join("\n"));
});

test(`no hand-written module over ${MAX_LINES} lines`, async () => {
  const long: string[] = [];
  for (const [f, text] of await sourceFiles())
    if (!f.endsWith(".gen.ts")) {
      const lines = text.split("\n").length - (text.endsWith("\n") ? 1 : 0);
      if (lines > MAX_LINES) long.push(`${f}: ${lines} lines`);
    }
  assert.deepEqual(long, [], `split these (at most ${MAX_LINES} lines each):\n${long.join("\n")}`);
});

/** A Kysely query begun (or raw SQL, or Kysely itself imported): what only store/ may hold. */
const QUERY =
  /\.(selectFrom|insertInto|updateTable|deleteFrom|replaceInto|mergeInto)\(|\bsql`|from\s+["']kysely["']/g;

export function queriesOutsideStore(files: Map<string, string>): string[] {
  const found: string[] = [];
  for (const [f, text] of files) {
    if (!f.startsWith("packages/server/src/") || f.startsWith("packages/server/src/store/")) continue;
    const lines = text.split("\n");
    lines.forEach((line, i) => {
      if (QUERY.test(line)) found.push(`${f}:${i + 1}: ${line.trim()}`);
      QUERY.lastIndex = 0;
    });
  }
  return found;
}

test("the query finder sees a query begun, raw SQL and Kysely imported, and nothing in store/", () => {
  const files = new Map([
    ["packages/server/src/api/a.ts", 'const r = await store\n  .selectFrom("hosts")\n  .execute();'],
    ["packages/server/src/b.ts", "await sql`select 1`.execute(db);"],
    ["packages/server/src/c.ts", 'import { sql } from "kysely";'],
    ["packages/server/src/store/d.ts", 'store.deleteFrom("hosts");'],
    ["packages/server/src/e.ts", "const selectFromList = 1; // selectFrom words in prose"],
  ]);
  assert.deepEqual(
    queriesOutsideStore(files).map((l) => l.split(":")[0]),
    ["packages/server/src/api/a.ts", "packages/server/src/b.ts", "packages/server/src/c.ts"],
  );
});

test("the server reaches its database through store/ alone", async () => {
  const found = queriesOutsideStore(await sourceFiles());
  assert.deepEqual(found, [], `queries outside packages/server/src/store/:\n${found.join("\n")}`);
});

/** The server's modules that build the HTTP surface out of its routes: the composition root. */
const API_COMPOSERS = new Set(["app.ts", "server.ts", "index.ts", "console-routes.ts"]);

/** Imports of the server's `api/` from anywhere but `api/` itself and the composition root. */
export function apiImportsFromBelow(graph: Map<string, string[]>): string[] {
  const base = "packages/server/src/";
  const found: string[] = [];
  for (const [f, deps] of graph) {
    if (!f.startsWith(base) || f.startsWith(`${base}api/`) || API_COMPOSERS.has(f.slice(base.length)))
      continue;
    for (const d of deps) if (d.startsWith(`${base}api/`)) found.push(`${f} imports ${d}`);
  }
  return found;
}

test("the API-import finder sees a layer below reaching up into api/, and lets the root and api/ be", () => {
  const files = new Map([
    ["packages/server/src/api/a-routes.ts", 'import { make } from "../environments/make.ts";'],
    ["packages/server/src/environments/make.ts", 'import type { ApiDeps } from "../api/a-routes.ts";'],
    ["packages/server/src/app.ts", 'import { routes } from "./api/a-routes.ts";'],
  ]);
  assert.deepEqual(apiImportsFromBelow(importGraph(files)), [
    "packages/server/src/environments/make.ts imports packages/server/src/api/a-routes.ts",
  ]);
});

test("nothing below the server's routes imports api/: environments, deployments and targets stand apart from HTTP", async () => {
  const found = apiImportsFromBelow(importGraph(await sourceFiles()));
  assert.deepEqual(found, [], `imports of api/ from below it:\n${found.join("\n")}`);
});

/** The denvd target's wire: the hosts' typed operations, the hub and the routing between replicas. */
const DENVD_WIRE = [
  "host-operations.ts",
  "host-hub.ts",
  "host-connections.ts",
  "host-exec.ts",
  "routed-hosts.ts",
  "peer-links.ts",
].map((f) => `packages/server/src/targets/denvd/${f}`);

/** Imports of the denvd target's wire from outside targets/denvd/ (tests included). */
export function wireImportsOutsideDenvd(graph: Map<string, string[]>): string[] {
  const found: string[] = [];
  for (const [f, deps] of graph) {
    if (f.startsWith("packages/server/src/targets/denvd/")) continue;
    for (const d of deps) if (DENVD_WIRE.includes(d)) found.push(`${f} imports ${d}`);
  }
  return found;
}

test("the wire finder sees the hub or the operations imported from outside the denvd target, and lets the folder be", () => {
  const files = new Map([
    ["packages/server/src/targets/denvd/host-operations.ts", "export interface HostOperations {}"],
    [
      "packages/server/src/targets/denvd/host-hub.ts",
      'import type { HostOperations } from "./host-operations.ts";',
    ],
    [
      "packages/server/src/deploy/k.ts",
      'import type { HostOperations } from "../targets/denvd/host-operations.ts";',
    ],
    ["test/x.test.ts", 'import { HostHub } from "../packages/server/src/targets/denvd/host-hub.ts";'],
  ]);
  assert.deepEqual(wireImportsOutsideDenvd(importGraph(files)), [
    "packages/server/src/deploy/k.ts imports packages/server/src/targets/denvd/host-operations.ts",
    "test/x.test.ts imports packages/server/src/targets/denvd/host-hub.ts",
  ]);
});

test("the hosts' operations and hub are private to targets/denvd/: everything else speaks the lifecycle port", async () => {
  const files = await sourceFiles();
  for (const pattern of ["packages/*/src/**/*.test.ts", "test/**/*.ts", "bench/**/*.ts"])
    for await (const f of glob(pattern, { cwd: ROOT, exclude: (p) => p.includes("node_modules") }))
      files.set(f, await readFile(join(ROOT, f), "utf8"));
  const found = wireImportsOutsideDenvd(importGraph(files));
  assert.deepEqual(found, [], `the denvd target's wire imported from outside it:\n${found.join("\n")}`);
});

/**
 * Calls of an operation by its id (`.call("postV1EnvsByIdFork", …)`) outside the clients that
 * implement `call`: everything else uses the generated named methods (`client.envs.fork(id, …)`).
 */
export function operationCallsByName(files: Map<string, string>): string[] {
  const found: string[] = [];
  for (const [f, text] of files) {
    // The generated methods, their generator, and this file's own examples.
    if (
      [
        "packages/sdk/src/schema.gen.ts",
        "packages/codegen/src/generate-sdk.ts",
        "test/harness/source-rules.test.ts",
      ].includes(f)
    )
      continue;
    for (const m of text.matchAll(/\.call\(\s*"((?:get|post|put|delete)V1\w*|getInstallSh)"/g))
      found.push(`${f} calls ${m[1]}`);
  }
  return found;
}

test("the call finder sees an operation called by its id and lets the generated methods be", () => {
  const files = new Map([
    ["packages/sdk/src/schema.gen.ts", 'fork: (id) => this.call("postV1EnvsByIdFork", { params: { id } }),'],
    [
      "packages/cli/src/x.ts",
      'await client().call("getV1EnvsById", { params: { id } });\nawait c.call("GET", "/v1/x");',
    ],
  ]);
  assert.deepEqual(operationCallsByName(files), ["packages/cli/src/x.ts calls getV1EnvsById"]);
});

test("the CLI, MCP, the console, the SDK and the tests call the API by its named methods", async () => {
  const files = await sourceFiles();
  for (const pattern of [
    "packages/*/src/**/*.test.ts",
    "packages/console/web/*.ts",
    "test/**/*.ts",
    "bench/**/*.ts",
  ])
    for await (const f of glob(pattern, { cwd: ROOT, exclude: (p) => p.includes("node_modules") }))
      files.set(f, await readFile(join(ROOT, f), "utf8"));
  const found = operationCallsByName(files);
  assert.deepEqual(found, [], `operations called by id instead of by name:\n${found.join("\n")}`);
});

/** What a route may import from targets/ and clouds/: the port's own types and checks, and services. */
const ROUTE_MAY_IMPORT = new Set([
  "packages/server/src/targets/target.ts",
  "packages/server/src/clouds/cloud-accounts.ts",
  "packages/server/src/clouds/secret-box.ts",
]);

/**
 * Where a route reaches past the application layer: a value imported from a target or a cloud
 * driver (types are the port's words, and may be), or a verb of the hosts' lifecycle called (their
 * presence, a read, may be). Routes parse, call a service, and answer.
 */
export function routesReachingPast(files: Map<string, string>): string[] {
  const found: string[] = [];
  const valueImport = /^\s*import\s+(?!type\b)[^;]*?\bfrom\s*["'](\.{1,2}\/[^"']+)["']/gms;
  for (const [f, text] of files) {
    if (!f.startsWith("packages/server/src/api/") || f.endsWith(".test.ts")) continue;
    for (const m of text.matchAll(valueImport)) {
      const to = normalize(join(dirname(f), m[1] as string));
      if (/^packages\/server\/src\/(targets|clouds)\//.test(to) && !ROUTE_MAY_IMPORT.has(to))
        found.push(`${f} imports ${to}`);
    }
    for (const m of text.matchAll(/\bstacks\.(\w+)\(/g))
      if (m[1] !== "hostConnected") found.push(`${f} calls stacks.${m[1]}`);
  }
  return found;
}

test("the route finder sees a target's value imported or a lifecycle verb called, and lets types, services and presence be", () => {
  const files = new Map([
    [
      "packages/server/src/api/a-routes.ts",
      'import type { DenvdStacks } from "../targets/denvd/denvd-stacks.ts";\nimport { requireHostsTarget } from "../targets/target.ts";\nconst up = deps.stacks.hostConnected(h);',
    ],
    [
      "packages/server/src/api/b-routes.ts",
      'import { hostedTarget } from "../targets/hosted-targets.ts";\nawait c.var.deps.stacks.deleteVersion(h, v);',
    ],
    ["packages/server/src/fleet/x.ts", 'import { hostedTarget } from "../targets/hosted-targets.ts";'],
  ]);
  assert.deepEqual(routesReachingPast(files), [
    "packages/server/src/api/b-routes.ts imports packages/server/src/targets/hosted-targets.ts",
    "packages/server/src/api/b-routes.ts calls stacks.deleteVersion",
  ]);
});

test("no route holds domain logic past parsing and answering: targets, hosts and providers are reached through the services", async () => {
  const found = routesReachingPast(await sourceFiles());
  assert.deepEqual(found, [], `routes reaching past the application layer:\n${found.join("\n")}`);
});
