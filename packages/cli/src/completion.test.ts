import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

const BIN = join(import.meta.dirname, "..", "bin", "denv.js");
const script = (shell: string) =>
  execFileSync(process.execPath, [BIN, "completion", shell], { encoding: "utf8" });
const bashScript = join(mkdtempSync(join(tmpdir(), "denv-completion-")), "denv.bash");
writeFileSync(bashScript, script("bash"));

/** What bash offers for the words typed so far (the last one being completed). */
function offered(words: string[]): string[] {
  const run = [
    'source "$1"',
    "shift",
    'COMP_WORDS=("$@")',
    "COMP_CWORD=$(($# - 1))",
    "_denv",
    'printf "%s\\n" "${COMPREPLY[@]}"',
  ].join("; ");
  const out = execFileSync("bash", ["-c", run, "bash", bashScript, ...words], { encoding: "utf8" });
  return out.split("\n").filter(Boolean);
}

test("bash completes commands, subcommands and options from the command tree", () => {
  assert.deepEqual(offered(["denv", "env", "l"]), ["list"]);
  assert.ok(offered(["denv", ""]).includes("fork"));
  assert.ok(offered(["denv", ""]).includes("completion"));
  assert.deepEqual(offered(["denv", "env", "destroy", "--j"]), ["--json"]);
  assert.deepEqual(offered(["denv", "fork", "--cou"]), ["--count"]);
  assert.deepEqual(offered(["denv", "fork", "--co"]).sort(), ["--cold", "--count"]);
  // A word that is not a command (an environment's name) does not move the path.
  assert.deepEqual(offered(["denv", "logs", "shop/alpha", "--fol"]), ["--follow"]);
});

test("zsh and fish scripts are made too; an unknown shell is a usage error", () => {
  assert.match(script("zsh"), /bashcompinit/);
  const fish = script("fish");
  assert.match(fish, /^complete -c denv -n '__fish_use_subcommand' -a '.*\bfork\b.*'$/m);
  assert.match(
    fish,
    /^complete -c denv -n '__fish_seen_subcommand_from env; and not __fish_seen_subcommand_from .*' -a '.*\blist\b.*'$/m,
  );
  const bad = spawnSync(process.execPath, [BIN, "completion", "tcsh"], { encoding: "utf8" });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /tcsh: the shells are bash, zsh and fish/);
});
