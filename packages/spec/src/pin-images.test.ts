/**
 * Pinning against real parts: the local registry the set-up runs on 127.0.0.1:5000 (Registry HTTP
 * API v2) and the local Docker engine. Only loopback is contacted.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { DenvError } from "@denv/protocol";
import {
  ChainPinner,
  EnginePinner,
  namesNoRegistry,
  parseImageReference,
  pinSpec,
  RegistryPinner,
} from "./pin-images.ts";
import { validateCompose } from "./validate-compose.ts";

const docker = (...args: string[]) => execFileSync("docker", args, { encoding: "utf8" }).trim();
const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";

test("image references parse as Docker reads them", () => {
  assert.deepEqual(parseImageReference("postgres:16-alpine"), {
    domain: "docker.io",
    path: "library/postgres",
    tag: "16-alpine",
    digest: null,
  });
  assert.deepEqual(parseImageReference("127.0.0.1:5000/denv/opsbox"), {
    domain: "127.0.0.1:5000",
    path: "denv/opsbox",
    tag: "latest",
    digest: null,
  });
  assert.equal(parseImageReference("ghcr.io/you/v:1.2@sha256:abc").digest, "sha256:abc");
  assert.throws(() => parseImageReference("UPPER/case"), DenvError);
});

test("the registry pinner returns the manifest digest the engine recorded on push", async () => {
  const pinned = await new RegistryPinner().pin(OPSBOX);
  const repoDigests = JSON.parse(
    docker("image", "inspect", "-f", "{{json .RepoDigests}}", OPSBOX),
  ) as string[];
  assert.equal(pinned.source, "registry");
  assert.match(pinned.digest, /^sha256:[0-9a-f]{64}$/);
  assert.ok(repoDigests.includes(`127.0.0.1:5000/denv/opsbox@${pinned.digest}`), JSON.stringify(repoDigests));
  assert.equal(pinned.pinned, `127.0.0.1:5000/denv/opsbox@${pinned.digest}`);
});

test("a tag the registry lacks is image_not_found; the engine pinner gives the image ID", async () => {
  const tag = `127.0.0.1:5000/denv/unpushed:${randomBytes(4).toString("hex")}`;
  docker("tag", "debian:bookworm", tag);
  try {
    await assert.rejects(
      new RegistryPinner().pin(tag),
      (e: unknown) => e instanceof DenvError && e.code === "image_not_found",
    );
    const id = docker("image", "inspect", "-f", "{{.Id}}", tag);
    const viaEngine = await new EnginePinner().pin(tag);
    assert.deepEqual(viaEngine, { reference: tag, digest: id, pinned: id, source: "engine" });
    const viaChain = await new ChainPinner(new RegistryPinner(), new EnginePinner()).pin(tag);
    assert.equal(viaChain.source, "engine");
  } finally {
    docker("rmi", tag);
  }
  await assert.rejects(
    new EnginePinner().pin(tag),
    (e: unknown) => e instanceof DenvError && e.code === "image_not_found",
  );
});

test("pinSpec pins every ops-world image and the verifier, and changes the hash", async () => {
  const text = readFileSync(
    join(import.meta.dirname, "../../../examples/ops-world/docker-compose.yaml"),
    "utf8",
  );
  const r = validateCompose(text, { env: {} });
  assert.ok(r.ok);
  const pinned = await pinSpec(r.spec, new RegistryPinner());
  for (const svc of Object.values(pinned.services)) {
    assert.match(svc.image_digest ?? "", /^sha256:[0-9a-f]{64}$/);
    assert.ok(svc.image_pinned?.startsWith(`${svc.image.replace(/:[^:/]+$/, "")}@sha256:`));
  }
  assert.match(pinned.verifier?.image_pinned ?? "", /ops-verifier@sha256:/);
  assert.notEqual(pinned.hash, r.spec.hash);
  assert.equal((await pinSpec(r.spec, new RegistryPinner())).hash, pinned.hash, "pinning is deterministic");
});

test("a registry that cannot be reached is named, with what to do; a bare name is said to be Docker Hub's", async () => {
  for (const [ref, bare] of [
    ["shop-verifier", true],
    ["you/app:1", true],
    ["localhost/app", false],
    ["127.0.0.1:5000/denv/opsbox:bookworm", false],
    ["ghcr.io/you/verifier:1.2", false],
  ] as const)
    assert.equal(namesNoRegistry(ref), bare, ref);
  // Nothing listens on port 1 of loopback: the connection is refused at once.
  await assert.rejects(new RegistryPinner().pin("127.0.0.1:1/denv/gone:1"), (e: unknown) => {
    assert.ok(e instanceof DenvError, String(e));
    assert.equal(e.code, "registry_error");
    assert.match(
      e.message,
      /^could not reach registry 127\.0\.0\.1:1 for 127\.0\.0\.1:1\/denv\/gone:1 \(.+\): check that 127\.0\.0\.1:1 is up/,
    );
    assert.deepEqual(e.details, { registry: "127.0.0.1:1", image: "127.0.0.1:1/denv/gone:1" });
    return true;
  });
});
