/** The schemas of cloud accounts' routes (cloud-routes.ts): what connecting one takes and what a listed one says. */
import { nameSchema } from "@denv/protocol";
import { z } from "zod";

export const cloudConnectBody = z.strictObject({
  provider: z.string().min(1),
  name: nameSchema,
  /** The provider's API token: stored encrypted, never returned. */
  token: z.string().min(1).max(4096),
  /**
   * A machine provider's (hetzner) machine type and place; a hosted provider has no machine type,
   * and Daytona's and Prime's location is their region (default us).
   */
  server_type: z.string().min(1).max(100).optional(),
  location: z.string().min(1).max(100).optional(),
  /**
   * Another endpoint speaking the provider's API (default: the provider's own). For E2B it serves
   * the sandboxes' envd as well (E2B_SANDBOX_URL).
   */
  api_url: z.url().optional(),
});

export const cloudSchema = z.object({
  name: z.string(),
  provider: z.string(),
  server_type: z.string(),
  location: z.string(),
  api_url: z.string().nullable(),
  created_at: z.string(),
  /** Machines denv created there that still exist. */
  machines: z.array(z.object({ name: z.string(), server_id: z.string(), status: z.string() })),
});
