import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import type { ResolvedSpec } from "@denv/protocol";
import { validateCompose } from "@denv/spec";
import { containerSpecFor } from "./container-spec.ts";
import { LABEL } from "./labels.ts";
import { removeStackSecrets, secretsDirOf, writeStackSecrets } from "./stack-secrets.ts";

const compose = `services:
  db:
    image: postgres:16
    secrets: [pw]
  app:
    image: alpine
    secrets: [{source: pw, target: /etc/app/pw, uid: "7", gid: "8", mode: "0400"}]
  other:
    image: alpine
secrets:
  pw: {file: pw.txt}
`;

function resolved(): ResolvedSpec {
  const r = validateCompose(compose, { files: { "pw.txt": "hunter2\n" }, projectName: "p" });
  assert.ok(r.ok, JSON.stringify(!r.ok && r.errors));
  return r.spec;
}

test("each service's file secrets are written for it alone, owned and moded as asked, and mounted read-only", async () => {
  const stateDir = mkdtempSync(join(tmpdir(), "denv-secrets-"));
  const spec = resolved();
  const mounts = await writeStackSecrets(stateDir, "stk_1", spec);
  assert.deepEqual(Object.keys(mounts).sort(), ["app", "db"]);
  const db = mounts.db?.[0];
  const app = mounts.app?.[0];
  assert.equal(db?.target, "/run/secrets/pw");
  assert.equal(app?.target, "/etc/app/pw");
  assert.equal(readFileSync(db?.source as string, "utf8"), "hunter2\n");
  const st = statSync(app?.source as string);
  assert.deepEqual([st.mode & 0o777, st.uid, st.gid], [0o400, 7, 8]);
  assert.equal(statSync(db?.source as string).mode & 0o777, 0o444);
  assert.equal(statSync(secretsDirOf(stateDir, "stk_1")).mode & 0o777, 0o700);
  const c = containerSpecFor({
    stack: { id: "stk_1", network: "n", operationId: "o", versionId: null, egress: "deny" },
    service: "app",
    s: spec.services.app as ResolvedSpec["services"][string],
    networkName: (n) => n,
    containerIds: {},
    labels: (extra) => ({ [LABEL.owner]: "o", ...extra }),
    agent: null,
    secrets: mounts.app,
  });
  assert.ok(
    c.mounts.some(
      (m) => m.kind === "bind" && m.source === app?.source && m.target === "/etc/app/pw" && m.readOnly,
    ),
  );
  // Written again (a restart of the same stack), then removed with the stack.
  await writeStackSecrets(stateDir, "stk_1", spec);
  await removeStackSecrets(stateDir, "stk_1");
  assert.throws(() => statSync(secretsDirOf(stateDir, "stk_1")));
});
