/**
 * The TypeScript SDK installed as the docs show (issue 70): `node scripts/pack-sdk.ts` makes an npm
 * tarball, a project outside the checkout installs it offline (it has no dependencies), imports
 * `@denv/sdk` from plain JavaScript and calls a server by the generated named methods, and its
 * declarations type-check a TypeScript caller (and refuse a wrong call).
 */
import assert from "node:assert/strict";
import { execFile, execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import { packSdk } from "../../scripts/pack-sdk.ts";
import { type Lab, openLab } from "../harness/lab.ts";

const ROOT = join(import.meta.dirname, "../..");
const work = mkdtempSync(join(tmpdir(), "denv-sdk-package-"));
let lab: Lab;
let project: string;

before(async () => {
  lab = await openLab({ hosts: 0 });
  const tgz = await packSdk(join(work, "dist"));
  project = join(work, "consumer");
  mkdirSync(project, { recursive: true });
  execFileSync("npm", ["init", "-y"], { cwd: project, stdio: "pipe" });
  execFileSync("npm", ["install", "--offline", "--no-audit", "--no-fund", tgz], {
    cwd: project,
    stdio: "pipe",
  });
});

after(async () => {
  await lab?.close();
  rmSync(work, { recursive: true, force: true });
});

test("a project outside the checkout installs the SDK's tarball and calls a server by its named methods", async () => {
  writeFileSync(
    join(project, "use.mjs"),
    `import { DenvClient, NotFoundError } from "@denv/sdk";
const client = new DenvClient({ baseUrl: process.env.DENV_SERVER, apiKey: process.env.DENV_API_KEY });
await client.projects.create({ name: "from-the-package", kind: "agent", source: "./x" });
const { projects } = await client.projects.list();
let missing = "";
try { await client.envs.get("no-such-env"); } catch (err) { missing = err instanceof NotFoundError ? err.code : String(err); }
console.log(JSON.stringify({ projects: projects.map((p) => p.name), missing }));
`,
  );
  // Run beside the server (it answers from this process): a synchronous child would stall it.
  const r = await promisify(execFile)(process.execPath, ["use.mjs"], {
    cwd: project,
    encoding: "utf8",
    env: { ...process.env, DENV_SERVER: lab.server.url, DENV_API_KEY: lab.keyA },
  });
  assert.deepEqual(JSON.parse(r.stdout), { projects: ["from-the-package"], missing: "not_found" });
});

test("the package's declarations type a TypeScript caller, and refuse a wrong call", () => {
  writeFileSync(
    join(project, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        target: "es2024",
        lib: ["es2024", "esnext.disposable"],
        module: "nodenext",
        moduleResolution: "nodenext",
        strict: true,
        noEmit: true,
        types: ["node"],
        typeRoots: [join(ROOT, "node_modules/@types")],
      },
      files: ["use.ts"],
    }),
  );
  const check = (body: string) => {
    writeFileSync(
      join(project, "use.ts"),
      `import { DenvClient, type GetV1EnvsResponse } from "@denv/sdk";\nconst client = new DenvClient({ baseUrl: "http://127.0.0.1:7070", apiKey: "k" });\n${body}\n`,
    );
    return spawnSync(join(ROOT, "node_modules/.bin/tsc"), ["-p", "."], { cwd: project, encoding: "utf8" });
  };
  const good = check(
    'export const list: Promise<GetV1EnvsResponse> = client.envs.list();\nexport const fork = client.envs.fork("shop/alpha", { name: "try-2" });',
  );
  assert.equal(good.status, 0, good.stdout + good.stderr);
  const wrong = check('export const fork = client.envs.fork("shop/alpha", { nmae: "try-2" });');
  assert.notEqual(wrong.status, 0);
  assert.match(wrong.stdout, /nmae/);
});
