import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { DEFAULT_CAPS } from "@denv/protocol";
import { canonicalJson, validateCompose } from "./validate-compose.ts";
import { xDenvSchema } from "./x-denv-schema.ts";

const seed = readFileSync(
  join(import.meta.dirname, "../../cli/src/templates/rl-environment/docker-compose.yaml"),
  "utf8",
);

test("the seed's compose file validates: declared caps honoured, defaults applied to the rest", () => {
  const r = validateCompose(seed, { env: {} });
  assert.ok(r.ok, JSON.stringify(!r.ok && r.errors));
  const { services } = r.spec;
  assert.deepEqual(services.opsbox?.caps, { memory_bytes: 2 * 1024 ** 3, pids: 512, cpus: 2 });
  assert.deepEqual(services.db?.caps, DEFAULT_CAPS);
  assert.deepEqual(services.queue?.caps, DEFAULT_CAPS);
  assert.equal(r.spec.kind, "rl-environment");
  assert.equal(r.spec.egress, "deny");
  assert.equal(r.spec.clock, "frozen");
  assert.deepEqual(r.spec.agent, { service: "opsbox" });
  assert.deepEqual(r.spec.warm, [
    { service: "opsbox", command: ["sh", "-c", "psql -h db -U postgres -f /seed/orders.sql"] },
  ]);
  assert.deepEqual(r.spec.verifier?.collect, ["/home/ubuntu/answer.txt"]);
  assert.deepEqual(services.db?.healthcheck, {
    test: ["CMD-SHELL", "pg_isready -U postgres"],
    interval_ms: 2000,
    timeout_ms: 30_000,
    start_period_ms: 0,
    start_interval_ms: null,
    retries: 30,
  });
  assert.deepEqual(Object.keys(r.spec.datasets).sort(), ["home", "pg", "redis"]);
  assert.deepEqual(r.spec.networks, { default: { internal: true } });
  assert.deepEqual(r.spec.start_order.slice(-1), ["opsbox"]);
  assert.equal(r.warnings.length, 0);
});

test("the resolved form is deterministic and its hash follows its content", () => {
  const a = validateCompose(seed, { env: {} });
  const b = validateCompose(seed.replace("services:", "# a comment\nservices:"), { env: {} });
  assert.ok(a.ok && b.ok);
  assert.equal(canonicalJson(a.spec), canonicalJson(b.spec));
  const c = validateCompose(seed.replace("pids_limit: 512", "pids_limit: 513"), { env: {} });
  assert.ok(c.ok);
  assert.notEqual(c.spec.hash, a.spec.hash);
});

test("every refusal is reported, not only the first", () => {
  const r = validateCompose(
    seed.replace('user: "1000:1000"', "user: root\n    privileged: true\n    cap_add: [ALL]"),
    {
      env: {},
    },
  );
  assert.ok(!r.ok);
  assert.deepEqual(r.errors.map((e) => e.code).sort(), ["agent_root", "cap_add", "privileged"]);
  const root = r.errors.find((e) => e.code === "agent_root");
  assert.equal(root?.path, "services.opsbox.user");
  assert.equal(root?.line, 31);
});

test("a user that interpolates to root is refused; the environment wins over .env", () => {
  const text = seed.replace('user: "1000:1000"', 'user: "${AGENT_UID}:1000"');
  assert.ok(!validateCompose(text, { env: { AGENT_UID: "0" } }).ok);
  assert.ok(!validateCompose(text, { dotenv: "AGENT_UID=root" }).ok);
  assert.ok(validateCompose(text, { dotenv: "AGENT_UID=root", env: { AGENT_UID: "1000" } }).ok);
});

test("files over 1 MiB are refused before parsing", () => {
  const r = validateCompose(`${seed}\n#${"x".repeat(1024 * 1024)}`);
  assert.ok(!r.ok);
  assert.equal(r.errors[0]?.code, "file_too_large");
});

test("build without image is refused only where the target cannot build", () => {
  const text = "services:\n  app:\n    build: .\n";
  assert.ok(validateCompose(text, { projectName: "p" }).ok);
  const r = validateCompose(text, { noBuild: true });
  assert.ok(!r.ok && r.errors[0]?.code === "build_without_image");
});

test("x-denv.target: a name; absent leaves the spec (and its hash) as before; a name that is not one is refused where it is", () => {
  const file = (target: string) =>
    `x-denv: { kind: agent${target ? `, target: ${target}` : ""} }\nservices:\n  box: { image: "img:1", user: "1000" }\n`;
  const ok = (target: string) => {
    const r = validateCompose(file(target), { env: {} });
    assert.ok(r.ok, JSON.stringify(!r.ok && r.errors));
    return r.spec;
  };
  assert.equal(ok("daytona").target, "daytona");
  assert.equal(ok("gpu-box.1").target, "gpu-box.1");
  const none = ok("");
  assert.equal("target" in none, false);
  assert.equal(none.hash, ok("").hash);
  assert.notEqual(ok("e2b").hash, none.hash, "where it runs is part of what the file says");
  for (const bad of ['""', '"../x"', '"a b"', '"-lead"', `"${"x".repeat(64)}"`, "3", "[e2b]"]) {
    const r = validateCompose(file(bad), { env: {} });
    assert.equal(r.ok, false, `target: ${bad} was accepted`);
    assert.match(JSON.stringify(!r.ok && r.errors), /target/, `target: ${bad}`);
  }
});

test("x-denv.replicas: 1 to 16 copies; absent leaves the spec (and its hash) as before; anything else is refused where it is", () => {
  const file = (replicas: string) =>
    `x-denv: { kind: agent${replicas ? `, replicas: ${replicas}` : ""} }\nservices:\n  box: { image: "img:1", user: "1000" }\n`;
  const r = validateCompose(file("3"), { env: {} });
  assert.ok(r.ok);
  assert.equal(r.ok && r.spec.replicas, 3);
  const none = validateCompose(file(""), { env: {} });
  assert.ok(none.ok && !("replicas" in none.spec));
  for (const bad of ["0", "17", "1.5", '"two"', "{ n: 2 }"]) {
    const b = validateCompose(file(bad), { env: {} });
    assert.equal(b.ok, false, `replicas: ${bad} was accepted`);
    assert.match(JSON.stringify(!b.ok && b.errors), /replicas/, `replicas: ${bad}`);
  }
});

test("x-denv.idle_pause_s: 60 s to a week; absent leaves the spec as before; anything else is refused where it is", () => {
  const file = (idle: string) =>
    `x-denv: { kind: service${idle ? `, idle_pause_s: ${idle}` : ""} }\nservices:\n  web: { image: "img:1" }\n`;
  const r = validateCompose(file("900"), { env: {} });
  assert.ok(r.ok, JSON.stringify(!r.ok && r.errors));
  assert.equal(r.ok && r.spec.idle_pause_s, 900);
  const none = validateCompose(file(""), { env: {} });
  assert.ok(none.ok && !("idle_pause_s" in none.spec));
  for (const bad of ["59", "604801", "90.5", '"15m"', "-60"]) {
    const b = validateCompose(file(bad), { env: {} });
    assert.equal(b.ok, false, `idle_pause_s: ${bad} was accepted`);
    assert.match(JSON.stringify(!b.ok && b.errors), /idle_pause_s/, `idle_pause_s: ${bad}`);
  }
});

test("x-denv.ingress.public: services that publish a port; absent leaves the spec as before; anything else is refused where it is", () => {
  const file = (ingress: string) =>
    `x-denv: { kind: service${ingress ? `, ingress: ${ingress}` : ""} }\nservices:\n  web: { image: "img:1", ports: ["8000"] }\n  db: { image: "img:1" }\n`;
  const r = validateCompose(file("{ public: [web, web] }"), { env: {} });
  assert.ok(r.ok, JSON.stringify(!r.ok && r.errors));
  assert.deepEqual(r.ok && r.spec.ingress, { public: ["web"] });
  const none = validateCompose(file(""), { env: {} });
  assert.ok(none.ok && !("ingress" in none.spec));
  for (const [bad, says] of [
    ["{ public: [nope] }", /ingress\.public names service nope, which is not in the file/],
    ["{ public: [db] }", /db, which publishes no port/],
    ["{ public: web }", /public/],
    ["{ private: [web] }", /private/],
  ] as const) {
    const b = validateCompose(file(bad), { env: {} });
    assert.equal(b.ok, false, `ingress: ${bad} was accepted`);
    assert.match(JSON.stringify(!b.ok && b.errors), says, bad);
  }
});

test("x-denv.pool: a number or {size}, 0 to 256; absent leaves the spec (and its hash) as before; anything else is refused where it is", () => {
  const file = (pool: string) =>
    `x-denv: { kind: agent${pool ? `, pool: ${pool}` : ""} }\nservices:\n  box: { image: "img:1", user: "1000" }\n`;
  const ok = (pool: string) => {
    const r = validateCompose(file(pool), { env: {} });
    assert.ok(r.ok, JSON.stringify(!r.ok && r.errors));
    return r.spec;
  };
  assert.equal(ok("4").pool, 4);
  assert.equal(ok("{ size: 2 }").pool, 2);
  assert.equal("pool" in ok(""), false);
  for (const bad of ["-1", "257", "1.5", '"8"', "{ size: 1000 }", "{ size: 1, extra: 1 }", "[1]"]) {
    const r = validateCompose(file(bad), { env: {} });
    assert.equal(r.ok, false, `pool: ${bad} was accepted`);
    assert.match(JSON.stringify(!r.ok && r.errors), /pool/, `pool: ${bad}`);
  }
});

test("x-denv's refusals name the key where it is, with the key that was likely meant; a misspelt required key is said once", () => {
  const text = [
    "x-denv:",
    "  kind: agent",
    "  egres: deny",
    "  agent:",
    "    servce: box",
    "  verifier: { image: v:1, colect: [/a] }",
    "  pool: { size: 1, enviroment: alpha }",
    "  wholly_unknown: 1",
    "services:",
    '  box: { image: "img:1", user: "1000" }',
    "",
  ].join("\n");
  const r = validateCompose(text, { env: {} });
  assert.ok(!r.ok);
  const said = r.errors.map((e) => [e.path, e.message]);
  assert.deepEqual(said, [
    ["x-denv.egres", 'x-denv has no key "egres"; did you mean "egress"?'],
    ["x-denv.agent.servce", 'x-denv.agent has no key "servce"; did you mean "service"?'],
    ["x-denv.verifier.colect", 'x-denv.verifier has no key "colect"; did you mean "collect"?'],
    ["x-denv.pool.enviroment", 'x-denv.pool has no key "enviroment"; did you mean "environment"?'],
    [
      "x-denv.wholly_unknown",
      `x-denv has no key "wholly_unknown" (it takes ${Object.keys(xDenvSchema.shape).join(", ")})`,
    ],
  ]);
  // Each at its own line of the file.
  assert.deepEqual(
    r.errors.map((e) => e.line),
    [3, 5, 6, 7, 8],
  );
});

test("a port published on the host is said to stay closed, with how the port is reached; a bare port is not", () => {
  const r = validateCompose(
    'x-denv: { kind: service }\nservices:\n  web:\n    image: "img:1"\n    ports: ["8080:8000", "9000", "127.0.0.1:5432:5432"]\n',
    { env: {} },
  );
  assert.ok(r.ok, JSON.stringify(!r.ok && r.errors));
  const said = r.warnings.filter((w) => w.code === "port_not_published");
  assert.deepEqual(
    said.map((w) => w.path),
    ["services.web.ports[0]", "services.web.ports[2]"],
  );
  assert.match(
    said[0]?.message ?? "",
    /^8080:8000: denv opens no port on the host \(8080 stays closed\); port 8000 is reached by a port URL \(denv port ENV 8000\)/,
  );
  assert.match(said[1]?.message ?? "", /^127\.0\.0\.1:5432:5432: /);
  assert.equal(said[0]?.line, 5);
});
