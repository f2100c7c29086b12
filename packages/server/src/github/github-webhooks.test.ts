import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { test } from "node:test";
import { verify } from "@octokit/webhooks-methods";
import { FetchPolicy } from "../fetch-policy.ts";
import { isRefName, openGitSource } from "../git-source.ts";
import { checkCloneUrl, parseGitHubSource } from "./github-apps.ts";
import { repositoryOf } from "./github-client.ts";
import { branchEnvironmentName, branchMatches } from "./github-webhooks.ts";

test("the signature check is GitHub's: its documented test vector verifies, a changed byte does not", async () => {
  const secret = "It's a Secret to Everybody";
  const sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
  assert.equal(await verify(secret, "Hello, World!", sig), true);
  assert.equal(await verify(secret, "Hello, World?", sig), false);
  assert.equal(await verify("another secret", "Hello, World!", sig), false);
  // Our own HMAC (the double's) agrees with it.
  assert.equal(`sha256=${createHmac("sha256", secret).update("Hello, World!").digest("hex")}`, sig);
});

test("branch patterns: * stays within a path segment, ** crosses them, the rest is literal", () => {
  assert.equal(branchMatches("feature/*", "feature/login"), true);
  assert.equal(branchMatches("feature/*", "feature/a/b"), false);
  assert.equal(branchMatches("feature/**", "feature/a/b"), true);
  assert.equal(branchMatches("main", "main"), true);
  assert.equal(branchMatches("main", "mainx"), false);
  // A dot is a dot, not any character; a pattern cannot smuggle a regular expression in.
  assert.equal(branchMatches("v1.2", "v1x2"), false);
  assert.equal(branchMatches("(a|b)", "a"), false);
});

test("a branch's environment name is one the names rule takes, never alpha's by accident", () => {
  assert.equal(branchEnvironmentName("feature/login"), "feature-login");
  assert.equal(branchEnvironmentName("Fix/UPPER__case"), "fix-upper__case");
  assert.equal(branchEnvironmentName("-/--."), "branch");
  assert.equal(branchEnvironmentName("x".repeat(100)).length, 63);
  assert.match(branchEnvironmentName("a/../../etc"), /^[a-z0-9][a-z0-9_-]*$/);
});

test("github: sources: OWNER/REPO, @branch and #path parsed; traversal, odd refs and other shapes refused", () => {
  assert.deepEqual(parseGitHubSource("github:acme/world"), {
    repository: "acme/world",
    ref: null,
    path: null,
  });
  assert.deepEqual(parseGitHubSource("github:acme/world@release/2#envs/ops"), {
    repository: "acme/world",
    ref: "release/2",
    path: "envs/ops",
  });
  for (const bad of [
    "github:acme",
    "github:acme/world/extra",
    "github:acme/world@..",
    "github:acme/world@a..b",
    "github:acme/world@-x",
    "github:acme/world#../secrets",
    "github:acme/world#/etc",
    "github:acme/world#a//b",
    "github:ac me/world",
    "github:../..",
    "github:acme/..",
    "github:./world",
  ])
    assert.throws(() => parseGitHubSource(bad), /github:OWNER\/REPO|not a branch|not a directory/, bad);
  assert.equal(isRefName("feature/x"), true);
  assert.equal(isRefName("x.lock"), false);
  assert.equal(isRefName("a\u0000b"), false);
  assert.equal(isRefName("a@{1}"), false);
});

test("GitHub's answers are checked: a clone URL elsewhere, a repository without a valid name or id, an odd default branch", () => {
  assert.equal(
    checkCloneUrl("https://github.com/acme/world.git", "https://api.github.com"),
    "https://github.com/acme/world.git",
  );
  assert.equal(
    checkCloneUrl("http://127.0.0.1:9/acme/world.git", "http://127.0.0.1:9"),
    "http://127.0.0.1:9/acme/world.git",
  );
  // The installation token goes to the API's own host only: never one another answer named.
  for (const [url, api] of [
    ["https://attacker.example/acme/world.git", "https://api.github.com"],
    ["https://github.com.attacker.example/w.git", "https://api.github.com"],
    ["http://github.com/acme/world.git", "https://api.github.com"],
    ["https://user:pw@github.com/acme/world.git", "https://api.github.com"],
    ["file:///etc/passwd", "https://api.github.com"],
    ["not a url", "https://api.github.com"],
  ] as const)
    assert.throws(() => checkCloneUrl(url, api), /denv sends its token|not a URL/, url);
  const ok = { id: 9, full_name: "acme/world", default_branch: "main", clone_url: "x", private: true };
  assert.equal(repositoryOf(ok).id, "9");
  for (const bad of [
    { ...ok, id: "9; drop" },
    { ...ok, full_name: "../.." },
    { ...ok, full_name: "acme/world/x" },
    { ...ok, default_branch: "main..x" },
    { ...ok, default_branch: "" },
    { ...ok, default_branch: "-x y" },
  ])
    assert.throws(() => repositoryOf(bad), /GitHub answered/, JSON.stringify(bad));
});

test("an installation token given to git never shows in what a failed fetch says", async () => {
  const token = "ghs_SECRETSECRETSECRET";
  const err = await openGitSource("http://127.0.0.1:1/acme/world.git", new FetchPolicy(["127.0.0.1:1"]), {
    commit: "a".repeat(40),
    authorization: `Basic ${Buffer.from(`x-access-token:${token}`).toString("base64")}`,
    label: "github:acme/world",
    timeoutMs: 20_000,
  }).then(
    () => null,
    (e: Error) => e,
  );
  assert.ok(err);
  assert.match(err.message, /git fetch of github:acme\/world failed/);
  assert.equal(err.message.includes(token), false);
  assert.equal(err.message.includes(Buffer.from(`x-access-token:${token}`).toString("base64")), false);
});
