/**
 * `bash scripts/install-cli.sh` puts `denv` on the PATH (issue 70: `npx denv` worked only in the
 * repository root): a launcher in $PREFIX/bin that runs from any directory, written safely for a
 * checkout whose path holds a space and a quote.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { test } from "node:test";

const REPO = resolve(import.meta.dirname, "../..");

test("install-cli puts a denv on the PATH that runs from anywhere, whatever the checkout's path", () => {
  const dir = mkdtempSync(join(tmpdir(), "denv-install-cli-"));
  try {
    // The checkout reached through a path with a space and a quote in it.
    const odd = join(dir, "it's a checkout");
    symlinkSync(REPO, odd);
    const prefix = join(dir, "prefix");
    const out = execFileSync("sh", [join(odd, "scripts/install-cli.sh")], {
      encoding: "utf8",
      env: { ...process.env, PREFIX: prefix },
    });
    assert.match(
      out,
      /^installed .*\/prefix\/bin\/denv → .*it's a checkout\/packages\/cli\/bin\/denv\.js \(\d+\.\d+\.\d+\)\n$/,
    );
    const launcher = readFileSync(join(prefix, "bin/denv"), "utf8");
    assert.ok(launcher.startsWith("#!/bin/sh\n"));
    const version = execFileSync(join(prefix, "bin/denv"), ["--version"], {
      encoding: "utf8",
      cwd: tmpdir(),
    });
    assert.match(version, /^\d+\.\d+\.\d+\n$/);
    const help = execFileSync(join(prefix, "bin/denv"), ["completion", "bash"], {
      encoding: "utf8",
      cwd: tmpdir(),
    });
    assert.match(help, /complete -o default -F _denv denv/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
