/**
 * Pinning: every image reference of a resolved spec becomes a digest, so a version always runs the
 * same bytes. Two real implementations behind one interface: the Registry HTTP API (v2), and the
 * local engine for images that no registry holds (their image ID).
 */
import { createHash } from "node:crypto";
import { request } from "node:http";
import type { ResolvedSpec } from "@denv/protocol";
import { DenvError } from "@denv/protocol";
import { readBounded } from "./bounded-fetch.ts";
import { withHash } from "./validate-compose.ts";

export interface PinnedImage {
  reference: string;
  /** sha256:… — the manifest digest (registry) or the image ID (engine). */
  digest: string;
  /** What to pull or run: repo@sha256:… for registry images, the image ID for engine-only ones. */
  pinned: string;
  source: "registry" | "engine";
}

export interface ImagePinner {
  pin(reference: string): Promise<PinnedImage>;
}

export interface ImageReference {
  domain: string;
  path: string;
  tag: string;
  digest: string | null;
}

/** Parses a Docker image reference: [domain[:port]/]path[:tag][@sha256:…]. */
export function parseImageReference(reference: string): ImageReference {
  let rest = reference;
  let digest: string | null = null;
  const at = rest.indexOf("@");
  if (at !== -1) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
  }
  const slash = rest.indexOf("/");
  let domain = "docker.io";
  const first = slash === -1 ? "" : rest.slice(0, slash);
  if (slash !== -1 && (first.includes(".") || first.includes(":") || first === "localhost")) {
    domain = first;
    rest = rest.slice(slash + 1);
  }
  let tag = "latest";
  const colon = rest.lastIndexOf(":");
  if (colon !== -1 && !rest.slice(colon).includes("/")) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
  }
  if (domain === "docker.io" && !rest.includes("/")) rest = `library/${rest}`;
  if (!/^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$/.test(rest)) {
    throw new DenvError("invalid_argument", `"${reference}" is not a valid image reference`);
  }
  return { domain, path: rest, tag, digest };
}

const MANIFEST_ACCEPT = [
  "application/vnd.oci.image.index.v1+json",
  "application/vnd.docker.distribution.manifest.list.v2+json",
  "application/vnd.docker.distribution.manifest.v2+json",
  "application/vnd.oci.image.manifest.v1+json",
].join(", ");

export interface RegistryPinnerOptions {
  /** Registries spoken to over plain HTTP. Default: loopback and localhost, as Docker does. */
  isInsecure?: (domain: string) => boolean;
  timeoutMs?: number;
  /**
   * Hosts (`name` or `name:port`) this pinner may contact: a registry named by an image, and an
   * auth realm on another host than its registry's. The control plane passes its fetch policy;
   * the default allows any (for trusted callers such as tests and the CLI).
   */
  allowHost?: (host: string) => boolean;
}

/** A manifest is small (registries cap them at 4 MiB); a token answer smaller still. */
export const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;
const MAX_TOKEN_BYTES = 64 * 1024;
const MAX_REDIRECTS = 3;
const DIGEST = /^sha256:[0-9a-f]{64}$/;

/**
 * Whether a reference names no registry of its own (`shop-verifier`, `you/app:1`): Docker reads it
 * as Docker Hub's, where an image built on a machine and never pushed is not.
 */
export function namesNoRegistry(reference: string): boolean {
  const first = reference.split("/")[0] ?? "";
  return !reference.includes("/") || !(first.includes(".") || first.includes(":") || first === "localhost");
}

export class RegistryPinner implements ImagePinner {
  private readonly isInsecure: (domain: string) => boolean;
  private readonly timeoutMs: number;
  private readonly allowHost: (host: string) => boolean;

  constructor(options: RegistryPinnerOptions = {}) {
    this.isInsecure =
      options.isInsecure ?? ((d) => /^(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$/.test(d));
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.allowHost = options.allowHost ?? (() => true);
  }

  async pin(reference: string): Promise<PinnedImage> {
    const ref = parseImageReference(reference);
    const host = ref.domain === "docker.io" ? "registry-1.docker.io" : ref.domain;
    const url = new URL(
      `${this.isInsecure(ref.domain) ? "http" : "https"}://${host}/v2/${ref.path}/manifests/${ref.digest ?? ref.tag}`,
    );
    if (!this.allowHost(url.host)) {
      throw new DenvError(
        "forbidden",
        `${reference}: registry ${url.host} is not a host this server fetches from; an administrator can allow it (denv server --allow-fetch ${url.host})`,
      );
    }
    let res = await this.fetch(url, {}, reference);
    if (res.status === 401) {
      await res.body?.cancel().catch(() => {});
      const token = await this.anonymousToken(url, res.headers.get("www-authenticate"), reference);
      res = await this.fetch(url, { authorization: `Bearer ${token}` }, reference);
    }
    if (res.status === 404) {
      await res.body?.cancel().catch(() => {});
      throw new DenvError(
        "image_not_found",
        `${reference} is not in its registry (${ref.domain}); push it, or fix the name`,
      );
    }
    if (!res.ok) {
      await res.body?.cancel().catch(() => {});
      throw new DenvError("registry_error", `registry ${ref.domain} answered ${res.status} for ${reference}`);
    }
    // The digest is that of the bytes received; a registry's header must agree with them.
    const body = await readBounded(res, MAX_MANIFEST_BYTES, `the manifest of ${reference}`);
    const digest = `sha256:${createHash("sha256").update(body).digest("hex")}`;
    const claimed = res.headers.get("docker-content-digest");
    if (claimed !== null && claimed !== digest) {
      throw new DenvError(
        "registry_error",
        `registry ${ref.domain} answered a digest for ${reference} that does not match the manifest it sent`,
      );
    }
    if (ref.digest && ref.digest !== digest) {
      throw new DenvError("registry_error", `registry ${ref.domain} sent another manifest than ${reference}`);
    }
    if (!DIGEST.test(digest) || !isManifest(body)) {
      throw new DenvError("registry_error", `registry ${ref.domain} answered ${reference} with no manifest`);
    }
    const repo = reference.split("@")[0]?.replace(/:[^:/]+$/, "") ?? reference;
    return { reference, digest, pinned: `${repo}@${digest}`, source: "registry" };
  }

  /** A GET that follows redirects only within the same origin (scheme, host and port). */
  private async fetch(url: URL, headers: Record<string, string>, reference: string): Promise<Response> {
    let current = url;
    for (let hop = 0; ; hop++) {
      let res: Response;
      try {
        res = await fetch(current, {
          method: "GET",
          redirect: "manual",
          headers: { accept: MANIFEST_ACCEPT, ...headers },
          signal: AbortSignal.timeout(this.timeoutMs),
        });
      } catch (err) {
        // Named with the registry asked and the way out: an image only a machine's engine has
        // (built with `docker build`, never pushed) is looked up on Docker Hub by its bare name.
        const why =
          (err as Error).cause instanceof Error
            ? ((err as Error).cause as Error).message
            : (err as Error).message;
        const bare = namesNoRegistry(reference);
        throw new DenvError(
          "registry_error",
          `could not reach registry ${current.host} for ${reference} (${why})${
            bare
              ? `: a bare name is looked up on Docker Hub; an image built on your machine is in no registry: push it to one your server and hosts reach and name it so (REGISTRY/${reference}), or give the service a build: so denv builds it on the host`
              : `: check that ${current.host} is up and reachable from the server`
          }`,
          { cause: err, details: { registry: current.host, image: reference } },
        );
      }
      if (res.status < 300 || res.status >= 400) return res;
      await res.body?.cancel().catch(() => {});
      const location = res.headers.get("location");
      const next = location ? new URL(location, current) : null;
      if (!next || next.origin !== url.origin) {
        throw new DenvError(
          "registry_error",
          `the registry for ${reference} redirected to another host; denv does not follow it`,
        );
      }
      if (hop >= MAX_REDIRECTS)
        throw new DenvError("registry_error", `the registry for ${reference} redirected too many times`);
      current = next;
    }
  }

  /**
   * A pull token from the registry's auth realm. The realm is fetched only when it is on the
   * registry's own host or on an allowed one (Docker Hub's is auth.docker.io), over https unless
   * the registry itself is spoken to over http; no credential of denv's is ever sent to it.
   */
  private async anonymousToken(registry: URL, challenge: string | null, reference: string): Promise<string> {
    const params = Object.fromEntries(
      [...(challenge ?? "").matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1] as string, m[2] as string]),
    );
    if (!challenge?.startsWith("Bearer") || !params.realm) {
      throw new DenvError(
        "registry_error",
        `the registry for ${reference} requires credentials denv does not have`,
      );
    }
    let u: URL;
    try {
      u = new URL(params.realm);
    } catch {
      throw new DenvError(
        "registry_error",
        `the registry for ${reference} named an auth realm that is not a URL`,
      );
    }
    const sameHost = u.host === registry.host;
    const schemeOk =
      u.protocol === "https:" || (u.protocol === "http:" && registry.protocol === "http:" && sameHost);
    if (!schemeOk || u.username || u.password || (!sameHost && !this.allowHost(u.host))) {
      throw new DenvError(
        "registry_error",
        `the registry for ${reference} sends clients to an auth realm on ${u.host}, which this server does not fetch from`,
      );
    }
    if (params.service) u.searchParams.set("service", params.service);
    if (params.scope) u.searchParams.set("scope", params.scope);
    let res: Response;
    try {
      res = await fetch(u, { redirect: "manual", signal: AbortSignal.timeout(this.timeoutMs) });
    } catch (err) {
      throw new DenvError("registry_error", `could not get a registry token for ${reference}`, {
        cause: err,
      });
    }
    if (!res.ok) {
      await res.body?.cancel().catch(() => {});
      throw new DenvError("registry_error", `the registry refused a token for ${reference}`);
    }
    let body: { token?: unknown; access_token?: unknown } = {};
    try {
      body = JSON.parse((await readBounded(res, MAX_TOKEN_BYTES, "the token answer")).toString("utf8"));
    } catch (err) {
      if (err instanceof DenvError) throw err;
    }
    const token = body.token ?? body.access_token;
    if (typeof token !== "string" || !token || token.length > MAX_TOKEN_BYTES || /[\r\n]/.test(token))
      throw new DenvError("registry_error", `the registry refused a token for ${reference}`);
    return token;
  }
}

/** Whether bytes are a JSON object with a schemaVersion, as every image manifest and index is. */
function isManifest(body: Buffer): boolean {
  try {
    const v = JSON.parse(body.toString("utf8")) as { schemaVersion?: unknown };
    return typeof v === "object" && v !== null && typeof v.schemaVersion === "number";
  } catch {
    return false;
  }
}

/** Pins through the local Docker engine: the image ID of an image the engine holds. */
export class EnginePinner implements ImagePinner {
  private readonly socketPath: string;
  constructor(socketPath = "/var/run/docker.sock") {
    this.socketPath = socketPath;
  }

  pin(reference: string): Promise<PinnedImage> {
    return new Promise((resolve, reject) => {
      const req = request(
        { socketPath: this.socketPath, path: `/images/${encodeURIComponent(reference)}/json`, method: "GET" },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () => {
            if (res.statusCode === 404) {
              reject(
                new DenvError(
                  "image_not_found",
                  `the engine has no image ${reference}; build or pull it first`,
                ),
              );
              return;
            }
            if (res.statusCode !== 200) {
              reject(
                new DenvError("engine_error", `the engine answered ${res.statusCode} for image ${reference}`),
              );
              return;
            }
            const info = JSON.parse(Buffer.concat(chunks).toString()) as { Id: string };
            resolve({ reference, digest: info.Id, pinned: info.Id, source: "engine" });
          });
        },
      );
      req.on("error", (err) =>
        reject(
          new DenvError("engine_error", `the Docker engine is unreachable: ${err.message}`, { cause: err }),
        ),
      );
      req.end();
    });
  }
}

/** Tries each pinner in turn; the first that knows the image wins. */
export class ChainPinner implements ImagePinner {
  private readonly pinners: ImagePinner[];
  constructor(...pinners: ImagePinner[]) {
    this.pinners = pinners;
  }

  async pin(reference: string): Promise<PinnedImage> {
    const failures: string[] = [];
    for (const p of this.pinners) {
      try {
        return await p.pin(reference);
      } catch (err) {
        if (!(err instanceof DenvError)) throw err;
        failures.push(err.message);
      }
    }
    throw new DenvError("image_not_found", `no registry or engine has ${reference}: ${failures.join("; ")}`);
  }
}

/** Returns the spec with every image (services and verifier) pinned, and its hash recomputed. */
export async function pinSpec(spec: ResolvedSpec, pinner: ImagePinner): Promise<ResolvedSpec> {
  // A service with build: is pinned by the host that builds it (prepare), not by a registry.
  const refs = new Set<string>(
    Object.values(spec.services)
      .filter((s) => !s.build)
      .map((s) => s.image),
  );
  if (spec.verifier?.image) refs.add(spec.verifier.image);
  const pinned = new Map<string, PinnedImage>();
  await Promise.all([...refs].map(async (r) => pinned.set(r, await pinner.pin(r))));
  const services = Object.fromEntries(
    Object.entries(spec.services).map(([name, s]) => {
      if (s.build) return [name, s];
      const p = pinned.get(s.image) as PinnedImage;
      return [name, { ...s, image_digest: p.digest, image_pinned: p.pinned }];
    }),
  );
  const verifier = spec.verifier?.image
    ? {
        ...spec.verifier,
        image_digest: (pinned.get(spec.verifier.image) as PinnedImage).digest,
        image_pinned: (pinned.get(spec.verifier.image) as PinnedImage).pinned,
      }
    : spec.verifier;
  const { hash: _old, ...body } = spec;
  return withHash({ ...body, services, verifier });
}

/** The spec with each built service pinned to the image its host built (by id), hashed again. */
export function withBuiltImages(spec: ResolvedSpec, imageIds: Record<string, string>): ResolvedSpec {
  const services = Object.fromEntries(
    Object.entries(spec.services).map(([name, s]) => {
      const id = imageIds[name];
      return [name, id ? { ...s, image_digest: id, image_pinned: id } : s];
    }),
  );
  const { hash: _old, ...body } = spec;
  return withHash({ ...body, services });
}

/** The spec with each built service's uploaded context digest, hashed again. */
export function withContextDigests(spec: ResolvedSpec, digests: Record<string, string>): ResolvedSpec {
  const services = Object.fromEntries(
    Object.entries(spec.services).map(([name, s]) => {
      const d = digests[name];
      return [name, s.build && d ? { ...s, build: { ...s.build, context_digest: d } } : s];
    }),
  );
  const { hash: _old, ...body } = spec;
  return withHash({ ...body, services });
}

/** The spec with each seeded dataset's uploaded tar (its digest and kind), hashed again. */
export function withSeeds(
  spec: ResolvedSpec,
  seeds: Record<string, { digest: string; type: "file" | "directory" }>,
): ResolvedSpec {
  const datasets = Object.fromEntries(
    Object.entries(spec.datasets).map(([name, d]) => {
      const s = seeds[name];
      return [
        name,
        d.seed && s ? { ...d, seed: { source: d.seed.source, type: s.type, digest: s.digest } } : d,
      ];
    }),
  );
  const { hash: _old, ...body } = spec;
  return withHash({ ...body, datasets });
}
