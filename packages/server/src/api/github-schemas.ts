/**
 * The GitHub integration's request and response schemas (zod): connecting an App, its
 * repositories and deliveries, and the environments its webhooks made. Beside api-schemas.ts,
 * which holds the rest of /v1's.
 */
import { z } from "zod";

export const githubConnectBody = z.strictObject({
  /** The App's ID (its settings page, "App ID"). */
  app_id: z.string().regex(/^\d{1,20}$/, "GitHub's App ID is a number"),
  /** The App's private key (.pem), stored encrypted, never returned. */
  private_key: z.string().min(1).max(16_384),
  /** The webhook secret set on the App, stored encrypted, never returned. */
  webhook_secret: z.string().min(16).max(1024),
  /** GitHub Enterprise Server's API (https://HOST/api/v3); default https://api.github.com. */
  api_url: z.string().url().optional(),
});

export const githubAppSchema = z.object({
  app_id: z.string(),
  slug: z.string(),
  api_url: z.string(),
  /** Where the App is installed on an account and given its repositories. */
  install_url: z.string(),
  /** Set this as the App's webhook URL. */
  webhook_url: z.string(),
  created_at: z.string(),
});

export const githubRepositorySchema = z.object({
  id: z.string(),
  full_name: z.string(),
  default_branch: z.string(),
  private: z.boolean(),
});

export const githubDeliverySchema = z.object({
  delivery_id: z.string(),
  app_id: z.string(),
  event: z.string(),
  outcome: z.string(),
  received_at: z.string(),
});

export const webhookAnswerSchema = z.object({
  outcome: z.string(),
  deployments: z.array(z.string()),
});

/** A branch or preview environment a webhook made, with what it runs. */
export const githubEnvironmentSchema = z.object({
  environment: z.string(),
  trigger: z.enum(["push", "branch", "preview"]),
  ref: z.string(),
  commit: z.string(),
  pushed_by: z.string().nullable(),
  pull_request: z.number().nullable(),
  status: z.string(),
  deployment_id: z.string(),
  deployment_status: z.string(),
  check_run_id: z.string().nullable(),
});
