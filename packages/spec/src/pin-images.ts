/**
 * Pinning: every image reference of a resolved spec becomes a digest, so a version always runs the
 * same bytes. Two real implementations behind one interface: the Registry HTTP API (v2), and the
 * local engine for images that no registry holds (their image ID).
 */
import { request } from "node:http";
import { DenvError } from "./errors.ts";
import type { ResolvedSpec } from "./resolved-spec.ts";
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
}

export class RegistryPinner implements ImagePinner {
  private readonly isInsecure: (domain: string) => boolean;
  private readonly timeoutMs: number;

  constructor(options: RegistryPinnerOptions = {}) {
    this.isInsecure =
      options.isInsecure ?? ((d) => /^(localhost|127\.\d+\.\d+\.\d+|\[::1\])(:\d+)?$/.test(d));
    this.timeoutMs = options.timeoutMs ?? 10_000;
  }

  async pin(reference: string): Promise<PinnedImage> {
    const ref = parseImageReference(reference);
    const host = ref.domain === "docker.io" ? "registry-1.docker.io" : ref.domain;
    const base = `${this.isInsecure(ref.domain) ? "http" : "https"}://${host}/v2/${ref.path}`;
    const url = `${base}/manifests/${ref.digest ?? ref.tag}`;
    let res = await this.fetch(url, {}, reference);
    if (res.status === 401) {
      const token = await this.anonymousToken(res.headers.get("www-authenticate"), reference);
      res = await this.fetch(url, { authorization: `Bearer ${token}` }, reference);
    }
    if (res.status === 404) {
      throw new DenvError(
        "image_not_found",
        `${reference} is not in its registry (${ref.domain}); push it, or fix the name`,
      );
    }
    if (!res.ok) {
      throw new DenvError("registry_error", `registry ${ref.domain} answered ${res.status} for ${reference}`);
    }
    let digest = res.headers.get("docker-content-digest");
    if (!digest) {
      const { createHash } = await import("node:crypto");
      digest = `sha256:${createHash("sha256")
        .update(Buffer.from(await res.arrayBuffer()))
        .digest("hex")}`;
    }
    const repo = reference.split("@")[0]?.replace(/:[^:/]+$/, "") ?? reference;
    return { reference, digest, pinned: `${repo}@${digest}`, source: "registry" };
  }

  private async fetch(url: string, headers: Record<string, string>, reference: string): Promise<Response> {
    try {
      return await fetch(url, {
        method: "GET",
        headers: { accept: MANIFEST_ACCEPT, ...headers },
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (err) {
      throw new DenvError(
        "registry_error",
        `could not reach the registry for ${reference}: ${(err as Error).message}`,
        {
          cause: err,
        },
      );
    }
  }

  private async anonymousToken(challenge: string | null, reference: string): Promise<string> {
    const params = Object.fromEntries(
      [...(challenge ?? "").matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1] as string, m[2] as string]),
    );
    if (!challenge?.startsWith("Bearer") || !params.realm) {
      throw new DenvError(
        "registry_error",
        `the registry for ${reference} requires credentials denv does not have`,
      );
    }
    const u = new URL(params.realm);
    if (params.service) u.searchParams.set("service", params.service);
    if (params.scope) u.searchParams.set("scope", params.scope);
    const res = await fetch(u, { signal: AbortSignal.timeout(this.timeoutMs) }).catch((err: unknown) => {
      throw new DenvError("registry_error", `could not get a registry token for ${reference}`, {
        cause: err,
      });
    });
    const body = (await res.json().catch(() => ({}))) as { token?: string; access_token?: string };
    const token = body.token ?? body.access_token;
    if (!res.ok || !token)
      throw new DenvError("registry_error", `the registry refused a token for ${reference}`);
    return token;
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
  const refs = new Set<string>(Object.values(spec.services).map((s) => s.image));
  if (spec.verifier?.image) refs.add(spec.verifier.image);
  const pinned = new Map<string, PinnedImage>();
  await Promise.all([...refs].map(async (r) => pinned.set(r, await pinner.pin(r))));
  const services = Object.fromEntries(
    Object.entries(spec.services).map(([name, s]) => {
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
