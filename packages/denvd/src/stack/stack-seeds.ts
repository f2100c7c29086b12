/**
 * Datasets seeded with the project's own files (compose's relative bind mounts): at prepare, before
 * any container of the stack exists, the tar the control plane sends is checked entry by entry
 * (tar-sanitizer.ts) and extracted by the engine into the fresh dataset, through a container that
 * is created for it and never started; denvd does not unpack a team's tar on the host. The files
 * keep the owners the tar gives them, as a bind mount shows the host's owners. A seed that is one
 * file is mounted alone, by its name in the dataset (a bind of that file, checked to be a regular
 * file), since the engine here has no volume subpaths; its container sees only that file, so it
 * can change its content but never swap it for a link. The folder mounted is the dataset itself:
 * it takes the owner and mode the tar's own root entry gives (the engine skips that entry), as a
 * bind mount shows the host folder's, so a service running as its owner can write where Compose
 * let it.
 */
import { chmod, chown, lstat } from "node:fs/promises";
import { join, posix } from "node:path";
import { PassThrough, type Readable } from "node:stream";
import { DenvError, type ResolvedSpec } from "@denv/protocol";
import { ONE_SHOT_CONTAINER } from "./container-spec.ts";
import { LABEL } from "./labels.ts";
import type { StackContext } from "./stack-context.ts";
import { sanitizeTar } from "./tar-sanitizer.ts";

const SEED_DIR = "/denv-seed";

type Seed = NonNullable<ResolvedSpec["datasets"][string]["seed"]>;

/** The name a one-file seed has in its dataset. */
export function seedFileName(seed: Seed): string {
  return posix.basename(seed.source);
}

/** Extracts `tar` into the fresh dataset `volume` of a stack that has no container yet. */
export async function seedDataset(
  ctx: StackContext,
  stackId: string,
  volume: string,
  tar: Readable,
): Promise<{ entries: number; bytes: number; ms: number }> {
  const started = performance.now();
  const stack = ctx.stack(stackId);
  const seed = stack.spec.datasets[volume]?.seed;
  const ds = stack.datasets[volume];
  if (!seed?.type || !ds)
    throw new DenvError("invalid_argument", `dataset ${volume} of stack ${stackId} takes no seed`);
  // Only while nothing of the stack runs: no container can race the extraction.
  if (stack.status !== "creating" || Object.keys(stack.containers).length > 0)
    throw new DenvError("conflict", `stack ${stackId} has started; its datasets are seeded only at prepare`);
  const image = Object.values(stack.spec.services).map((s) => s.image_pinned ?? s.image)[0];
  if (!image) throw new DenvError("invalid_argument", `stack ${stackId} has no service`);
  const path = ctx.storage.datasetPath(ds);
  const id = await ctx.runtime.createContainer({
    name: `${stack.network}-seed-${volume}`.slice(0, 200),
    image,
    // Never started: the engine extracts into its mounts without running anything of the image.
    entrypoint: ["/denv-never-runs"],
    cmd: [],
    env: {},
    user: "0",
    workingDir: null,
    hostname: "seed",
    labels: ctx.labels({
      [LABEL.stack]: stack.id,
      [LABEL.service]: "seed",
      [LABEL.operation]: stack.operationId,
    }),
    network: { kind: "none" },
    mounts: [{ kind: "bind", source: path, target: SEED_DIR, readOnly: false }],
    memoryBytes: 256 * 1024 ** 2,
    pids: 16,
    cpus: 1,
    init: false,
    ...ONE_SHOT_CONTAINER,
  });
  try {
    const checked = new PassThrough({ highWaterMark: 1024 * 1024 });
    const checking = sanitizeTar(tar, checked);
    checking.catch(() => checked.destroy());
    const [check, put] = await Promise.allSettled([checking, ctx.runtime.putArchive(id, SEED_DIR, checked)]);
    if (check.status === "rejected") throw check.reason;
    if (put.status === "rejected") throw put.reason;
    const root = check.value.root;
    if (root && seed.type !== "file") {
      // The dataset's own folder on the host, made by denvd: no link can stand in its place.
      const st = await lstat(path);
      if (!st.isDirectory()) throw new DenvError("storage_error", `dataset ${volume} is not a folder`);
      await chown(path, root.uid, root.gid);
      await chmod(path, root.mode & 0o777);
    }
    if (seed.type === "file") {
      // What the container will be given alone must be a regular file, not a link or a folder.
      const st = await lstat(join(path, seedFileName(seed))).catch(() => null);
      if (!st?.isFile())
        throw new DenvError(
          "invalid_argument",
          `bind mount source ./${seed.source} is a file, but its upload holds no regular file ${seedFileName(seed)}`,
        );
    }
    ctx.log("Seeded dataset", { stack: stack.id, volume, source: seed.source, entries: check.value.entries });
    return {
      entries: check.value.entries,
      bytes: check.value.bytes,
      ms: Math.round(performance.now() - started),
    };
  } finally {
    await ctx.runtime.removeContainer(id).catch(() => {});
  }
}

/**
 * The host path a one-file seed is bound from, checked again to be a regular file (no link) just
 * before its container is made: nothing else mounts that dataset.
 */
export async function seedFileSource(hostPath: string, seed: Seed): Promise<string> {
  const source = join(hostPath, seedFileName(seed));
  const st = await lstat(source).catch(() => null);
  if (!st?.isFile())
    throw new DenvError(
      "invalid_argument",
      `the file ./${seed.source} mounted from the project is no longer a regular file in its dataset`,
    );
  return source;
}
