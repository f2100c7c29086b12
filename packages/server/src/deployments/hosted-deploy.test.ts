import assert from "node:assert/strict";
import { test } from "node:test";
import type { ResolvedSpec } from "@denv/protocol";
import { validateCompose } from "@denv/spec";
import { hostedServiceRefusal } from "./hosted-deploy.ts";

function spec(compose: string): ResolvedSpec {
  const r = validateCompose(compose, {
    env: {},
    noBuild: false,
    projectName: "p",
    files: { "key.txt": "k" },
  });
  assert.ok(r.ok, JSON.stringify(!r.ok && r.errors));
  return r.spec;
}

test("one service from an image, with named volumes, is what a hosted target runs", () => {
  const s = spec("services:\n  web:\n    image: nginx:1\n    volumes: [data:/srv]\nvolumes:\n  data: {}\n");
  assert.equal(hostedServiceRefusal("e2b", "web", s), null);
});

test("a build, the project's own files and file secrets are each refused, naming what and the target", () => {
  assert.match(
    hostedServiceRefusal("e2b", "web", spec("services:\n  web:\n    build: .\n")) ?? "",
    /^service web is built from a Dockerfile, and builds run on a denvd host/,
  );
  assert.match(
    hostedServiceRefusal(
      "modal",
      "web",
      spec("services:\n  web:\n    image: nginx:1\n    volumes: [./site:/srv]\n"),
    ) ?? "",
    /^service web mounts the project's own files \(\/srv\), which are not carried to target modal yet/,
  );
  assert.match(
    hostedServiceRefusal(
      "prime",
      "web",
      spec(
        "services:\n  web:\n    image: nginx:1\n    secrets: [key]\nsecrets:\n  key:\n    file: ./key.txt\n",
      ),
    ) ?? "",
    /^service web has file secrets \(key\), which are not carried to target prime yet/,
  );
});

test("an egress policy is refused on a hosted target, never run there as deny without a word", () => {
  const s = spec(
    "services:\n  web:\n    image: nginx:1\nx-denv:\n  kind: service\n  egress:\n    allow: [pkg.mirror.test]\n",
  );
  assert.match(
    hostedServiceRefusal("e2b", "web", s) ?? "",
    /^x-denv\.egress is a policy, which denv's egress proxy enforces on a denvd host: target e2b takes egress deny or allow/,
  );
});
