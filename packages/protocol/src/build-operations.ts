/** build_image's params and result: one image built on a host from a context the server streams. */
import { z } from "zod";
import { streamId } from "./operation-fields.ts";

/** What names one build: the sha256 (hex) of its context digest, Dockerfile, args, target and cache sources. */
export const buildKey = z.string().regex(/^[0-9a-f]{64}$/, "a build key (64 hex digits)");

export const buildImageParams = z.strictObject({
  build_key: buildKey,
  /** The local name the image is tagged with (repository:tag), besides its id. */
  tag: z
    .string()
    .max(255)
    .regex(/^[a-z0-9][a-z0-9._/-]*:[\w][\w.-]{0,127}$/, "a local image name (repository:tag)"),
  service: z.string().min(1).max(63),
  /** Relative to the context. */
  dockerfile: z.string().min(1).max(1024),
  args: z.record(z.string().max(256), z.string().max(65536)),
  target: z.string().max(256).nullable(),
  cache_from: z.array(z.string().max(512)).max(32),
  no_cache: z.boolean(),
  labels: z.record(z.string().max(256), z.string().max(4096)),
  /** Who the image is built for: it is labelled with them, and removed with their project. */
  owner: z
    .strictObject({ team_id: z.string().min(1).max(64), project_id: z.string().min(1).max(64) })
    .optional(),
  network: z.enum(["default", "none"]),
  /** Each build step's memory cap. */
  memory_bytes: z.number().int().positive(),
  timeout_ms: z.number().int().positive(),
  /** The context, a tar, from the server. */
  context_stream: streamId,
  /** The build's output, as the engine writes it, to the server. */
  log_stream: streamId,
});

export type BuildImageParams = z.output<typeof buildImageParams>;

export const buildImageResult = z.object({
  image_id: z.string().regex(/^sha256:[0-9a-f]{64}$/),
  ms: z.number(),
  steps: z.number().int().nonnegative(),
  log_tail: z.array(z.string()),
});
