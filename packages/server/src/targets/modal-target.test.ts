import assert from "node:assert/strict";
import { test } from "node:test";
import { DenvError } from "@denv/protocol";
import { isModalsOwn, splitModalToken } from "./modal-target.ts";

test("a Modal token is split into its id and secret at the first colon", () => {
  assert.deepEqual(splitModalToken("ak-abc:as-d:ef"), { tokenId: "ak-abc", tokenSecret: "as-d:ef" });
});

test("a token without both parts is refused, and the message never repeats it", () => {
  for (const bad of ["as-secretonly", ":as-secret", "ak-id:", "ak-id :as-secret", ""]) {
    assert.throws(
      () => splitModalToken(bad),
      (err: unknown) =>
        err instanceof DenvError &&
        err.code === "invalid_argument" &&
        /joined by a colon/.test(err.message) &&
        (bad === "" || !err.message.includes(bad)),
      JSON.stringify(bad),
    );
  }
});

test("Modal's own domains are https under modal.com or modal.host, and nothing that only looks like them", () => {
  for (const ok of ["https://api.modal.com", "https://ta-1.w.modal.host:443", "https://modal.host"])
    assert.ok(isModalsOwn(new URL(ok)), ok);
  for (const no of [
    "http://ta-1.modal.host",
    "https://modal.host.evil.example",
    "https://evilmodal.com",
    "https://127.0.0.1:9",
    "https://modal.com.attacker.io",
  ])
    assert.ok(!isModalsOwn(new URL(no)), no);
});
