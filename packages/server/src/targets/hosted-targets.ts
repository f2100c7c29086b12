/**
 * The hosted providers a team connected (`denv cloud connect e2b`), each a target named after its
 * cloud: the key opened from its seal and the endpoint checked against the fetch policy at each
 * use, as the provision phase does for a cloud's machines.
 */
import { DenvError } from "@denv/protocol";
import { checkCloudApiUrl } from "../clouds/hetzner-driver.ts";
import type { SecretBox } from "../clouds/secret-box.ts";
import type { FetchPolicy } from "../fetch-policy.ts";
import { teamClouds } from "../store/cloud-store.ts";
import type { Store } from "../store/open-store.ts";
import type { CloudsTable } from "../store/schema.ts";
import { E2bTarget } from "./e2b-target.ts";

/** Providers that are targets (no sidecar: the control plane drives their API). */
export const HOSTED_PROVIDERS = ["e2b"] as const;

export interface HostedDeps {
  store: Store;
  secrets: SecretBox;
  fetchPolicy: FetchPolicy;
}

export const isHosted = (provider: string) => (HOSTED_PROVIDERS as readonly string[]).includes(provider);

/** The target a hosted cloud is. */
export function hostedTarget(deps: HostedDeps, cloud: CloudsTable): E2bTarget {
  if (cloud.provider !== "e2b")
    throw new DenvError("invalid_argument", `${cloud.provider} is not a hosted provider`);
  return new E2bTarget(
    cloud.name,
    {
      apiKey: deps.secrets.open(cloud.token_sealed),
      apiUrl: checkCloudApiUrl(cloud.api_url, deps.fetchPolicy),
    },
    deps.store,
  );
}

/** Every hosted target of the team, in the order they were connected. */
export async function hostedTargets(deps: HostedDeps, teamId: string): Promise<E2bTarget[]> {
  return (await teamClouds(deps.store, teamId))
    .filter((c) => isHosted(c.provider))
    .map((c) => hostedTarget(deps, c));
}

/** The team's hosted target of that name, or null. */
export async function hostedTargetNamed(
  deps: HostedDeps,
  teamId: string,
  name: string,
): Promise<E2bTarget | null> {
  const cloud = (await teamClouds(deps.store, teamId)).find((c) => c.name === name && isHosted(c.provider));
  return cloud ? hostedTarget(deps, cloud) : null;
}
