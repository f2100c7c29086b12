import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createReadStream, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import tar from "tar-stream";
import { packProjectMount } from "./project-mounts.ts";

function project(files: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), "denv-mounts-"));
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(join(dir, rel, ".."), { recursive: true });
    writeFileSync(join(dir, rel), text);
  }
  return dir;
}

async function entriesOf(file: string): Promise<[string, string, string][]> {
  const out: [string, string, string][] = [];
  const extract = tar.extract();
  extract.on("entry", (h, stream, next) => {
    const chunks: Buffer[] = [];
    stream.on("data", (c) => chunks.push(c as Buffer));
    stream.on("end", () => {
      out.push([
        h.name,
        h.type ?? "",
        h.type === "symlink" ? (h.linkname ?? "") : Buffer.concat(chunks).toString(),
      ]);
      next();
    });
  });
  await new Promise((resolve, reject) => {
    extract.on("finish", () => resolve(undefined));
    extract.on("error", reject);
    createReadStream(file).pipe(extract);
  });
  return out;
}

test("a file packs alone, by its name; a folder as its contents, links inside kept, names with newlines too", async () => {
  const dir = project({
    "nginx/nginx.conf": "worker_processes 1;\n",
    "src/a.js": "a\n",
    "src/lib/b.js": "b\n",
  });
  writeFileSync(join(dir, "src/odd\nname.txt"), "odd\n");
  symlinkSync("lib/b.js", join(dir, "src/b-link.js"));
  try {
    const f = await packProjectMount(dir, "nginx/nginx.conf");
    assert.equal(f.type, "file");
    assert.deepEqual(await entriesOf(f.file), [["nginx.conf", "file", "worker_processes 1;\n"]]);
    const d = await packProjectMount(dir, "src");
    assert.equal(d.type, "directory");
    // The folder itself first: its owner and mode, as a bind mount shows the host folder's.
    assert.deepEqual(await entriesOf(d.file), [
      ["./", "directory", ""],
      ["a.js", "file", "a\n"],
      ["b-link.js", "symlink", "lib/b.js"],
      ["lib/", "directory", ""],
      ["lib/b.js", "file", "b\n"],
      ["odd\nname.txt", "file", "odd\n"],
    ]);
    // The same tree packs to the same tar.
    assert.equal((await packProjectMount(dir, "src")).digest, d.digest);
    for (const p of [f, d]) rmSync(dirname(p.file), { recursive: true, force: true });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("refused: a link on the way, a link inside pointing out, a FIFO, a source over the limit; a missing one is an empty folder", async () => {
  const dir = project({ "src/a.js": "a\n", "outside.txt": "host\n" });
  try {
    symlinkSync(join(dir, "outside.txt"), join(dir, "conf"));
    await assert.rejects(packProjectMount(dir, "conf"), /conf is a symbolic link/);
    symlinkSync("src", join(dir, "src-link"));
    await assert.rejects(packProjectMount(dir, "src-link/a.js"), /src-link is a symbolic link/);
    symlinkSync("../../outside.txt", join(dir, "src/escape"));
    await assert.rejects(
      packProjectMount(dir, "src"),
      /the link "escape" → "..\/..\/outside.txt" points outside it/,
    );
    rmSync(join(dir, "src/escape"));
    symlinkSync("/etc/passwd", join(dir, "src/abs"));
    await assert.rejects(packProjectMount(dir, "src"), /the link "abs" → "\/etc\/passwd" points outside it/);
    rmSync(join(dir, "src/abs"));
    execFileSync("mkfifo", [join(dir, "src/pipe")]);
    await assert.rejects(packProjectMount(dir, "src"), /"pipe" is a FIFO/);
    rmSync(join(dir, "src/pipe"));
    writeFileSync(join(dir, "src/big.bin"), "x".repeat(4096));
    await assert.rejects(packProjectMount(dir, "src", 4000), /holds more than/);
    await assert.rejects(packProjectMount(dir, "src/big.bin", 4000), /holds more than/);
    await assert.rejects(packProjectMount(dir, "../etc"), /outside the project/);
    const missing = await packProjectMount(dir, "not/there");
    assert.equal(missing.missing, true);
    assert.equal(missing.type, "directory");
    assert.deepEqual(await entriesOf(missing.file), []);
    rmSync(dirname(missing.file), { recursive: true, force: true });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
