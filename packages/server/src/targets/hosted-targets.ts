/**
 * The hosted providers a team connected (`denv cloud connect e2b|daytona|modal|prime`), each a target named
 * after its cloud: the key opened from its seal and the endpoint checked against the fetch policy
 * at each use, as the provision phase does for a cloud's machines.
 */
import { DenvError } from "@denv/protocol";
import { checkCloudApiUrl } from "../clouds/hetzner-driver.ts";
import type { SecretBox } from "../clouds/secret-box.ts";
import type { FetchPolicy } from "../fetch-policy.ts";
import { heldToPolicy } from "../outbound-guard.ts";
import { teamClouds } from "../store/cloud-store.ts";
import type { Store } from "../store/open-store.ts";
import type { CloudsTable } from "../store/schema.ts";
import { DaytonaTarget } from "./daytona-target.ts";
import { E2bTarget } from "./e2b-target.ts";
import type { HostedSandboxTarget } from "./hosted-sandbox-target.ts";
import { ModalTarget, splitModalToken } from "./modal-target.ts";
import { PrimeTarget } from "./prime-target.ts";

/** Providers that are targets (no sidecar: the control plane drives their API). */
export const HOSTED_PROVIDERS = ["e2b", "daytona", "modal", "prime"] as const;

export interface HostedDeps {
  store: Store;
  secrets: SecretBox;
  fetchPolicy: FetchPolicy;
}

export const isHosted = (provider: string) => (HOSTED_PROVIDERS as readonly string[]).includes(provider);

/**
 * The target a hosted cloud is. Everything it does runs on the team's behalf (outbound-guard.ts):
 * every connection its provider's SDK opens, on every hop and to any URL the provider's answers
 * name, is held to the fetch policy.
 */
export function hostedTarget(deps: HostedDeps, cloud: CloudsTable): HostedSandboxTarget {
  // The provider's own endpoints when the team named none (its API and the hosts its answers name).
  const policy = cloud.api_url
    ? deps.fetchPolicy
    : deps.fetchPolicy.with(PROVIDERS_OWN[cloud.provider] ?? []);
  return heldToPolicy(makeTarget(deps, cloud), policy, `${cloud.provider} target ${cloud.name}`);
}

/**
 * The hosts each provider's own service is reached at (its API, and the sandbox, toolbox, tunnel or
 * gateway hosts its answers name). Not checked against the live services: should one live
 * elsewhere, `--allow-fetch` adds it.
 */
const PROVIDERS_OWN: Record<string, string[]> = {
  e2b: ["e2b.app", "*.e2b.app"],
  daytona: ["daytona.io", "*.daytona.io"],
  modal: ["modal.com", "*.modal.com", "*.modal.host"],
  prime: ["primeintellect.ai", "*.primeintellect.ai"],
};

function makeTarget(deps: HostedDeps, cloud: CloudsTable): HostedSandboxTarget {
  const apiKey = deps.secrets.open(cloud.token_sealed);
  const apiUrl = checkCloudApiUrl(cloud.api_url, deps.fetchPolicy);
  switch (cloud.provider) {
    case "e2b":
      return new E2bTarget(cloud.name, { apiKey, apiUrl }, deps.store);
    case "daytona":
      return new DaytonaTarget(
        cloud.name,
        {
          apiKey,
          apiUrl,
          region: cloud.location,
          checkUrl: (url, what) => deps.fetchPolicy.check(url, what),
        },
        deps.store,
      );
    case "modal":
      return new ModalTarget(
        cloud.name,
        {
          ...splitModalToken(apiKey),
          apiUrl,
          checkUrl: (url, what) => deps.fetchPolicy.check(url, what),
        },
        deps.store,
      );
    case "prime":
      return new PrimeTarget(
        cloud.name,
        {
          apiKey,
          apiUrl,
          region: cloud.location,
          checkUrl: (url, what) => deps.fetchPolicy.check(url, what),
        },
        deps.store,
      );
    default:
      throw new DenvError("invalid_argument", `${cloud.provider} is not a hosted provider`);
  }
}

/** Every hosted target of the team, in the order they were connected. */
export async function hostedTargets(deps: HostedDeps, teamId: string): Promise<HostedSandboxTarget[]> {
  return (await teamClouds(deps.store, teamId))
    .filter((c) => isHosted(c.provider))
    .map((c) => hostedTarget(deps, c));
}

/** The team's hosted target of that name, or null. */
export async function hostedTargetNamed(
  deps: HostedDeps,
  teamId: string,
  name: string,
): Promise<HostedSandboxTarget | null> {
  const cloud = (await teamClouds(deps.store, teamId)).find((c) => c.name === name && isHosted(c.provider));
  return cloud ? hostedTarget(deps, cloud) : null;
}
