/**
 * A team's cloud accounts: a machine provider the provision phase creates hosts in (Hetzner, AWS),
 * or a hosted sandbox provider that is a target of its own (E2B, Daytona, Modal, Prime). A token is
 * tried before it is kept, and an account whose sandboxes still run is not let go. The routes
 * (api/cloud-routes.ts) and nothing else call these.
 */
import { DenvError } from "@denv/protocol";
import { newId, now } from "../ids.ts";
import { refusalIn } from "../outbound-guard.ts";
import { cloudNameTaken, deleteCloud, insertCloud, teamClouds } from "../store/cloud-store.ts";
import { environmentsAtTarget } from "../store/environment-store.ts";
import type { CloudsTable } from "../store/schema.ts";
import { HOSTED_PROVIDERS, type HostedDeps, hostedTarget, isHosted } from "../targets/hosted-targets.ts";
import { checkCloudApiUrl } from "./hetzner-driver.ts";
import { machineDriver, NOT_YET, PROVIDERS } from "./provisioner.ts";

/** What connecting an account takes (POST /v1/clouds's body). */
export interface CloudConnection {
  provider: string;
  name: string;
  token: string;
  server_type?: string | undefined;
  location?: string | undefined;
  api_url?: string | undefined;
}

/** Connects an account once its token is accepted; its row, the token sealed. */
export async function connectCloud(
  deps: HostedDeps,
  teamId: string,
  body: CloudConnection,
): Promise<CloudsTable> {
  const { store, secrets, fetchPolicy } = deps;
  const known = [...PROVIDERS, ...HOSTED_PROVIDERS] as readonly string[];
  if (!known.includes(body.provider)) {
    throw new DenvError(
      "invalid_argument",
      NOT_YET[body.provider] ?? `unknown cloud provider ${body.provider}; available: ${known.join(", ")}`,
    );
  }
  const hosted = isHosted(body.provider);
  // A hosted provider is a target by its cloud's name: the sidecar hosts' own name stays theirs.
  if (hosted && body.name === "denvd")
    throw new DenvError("invalid_argument", 'name: "denvd" is the target of your own hosts; pick another');
  if (!hosted && (!body.server_type || !body.location))
    throw new DenvError("invalid_argument", `${body.provider} needs server_type and location`);
  if (await cloudNameTaken(store, teamId, body.name))
    throw new DenvError("conflict", `a cloud named ${body.name} is already connected`);
  // The endpoint is a team's choice of what the server calls with a bearer token: an https URL
  // (http only to an allowed host) with no credentials, query or fragment, on an allowed host.
  const apiUrl = checkCloudApiUrl(body.api_url ?? null, fetchPolicy);
  const row: CloudsTable = {
    id: newId("cld"),
    team_id: teamId,
    name: body.name,
    provider: body.provider,
    token_sealed: secrets.seal(body.token),
    server_type: body.server_type ?? "",
    location: body.location ?? "",
    api_url: apiUrl,
    created_at: now(),
  };
  // The token is tried before it is kept: a wrong one is refused now, not at the first deploy.
  if (hosted) await hostedTarget(deps, row).checkKey();
  else
    try {
      await machineDriver(body.provider, body.token, row, fetchPolicy).listServers("denv");
    } catch (err) {
      // A malformed token or region is the caller's to fix as it is.
      if (err instanceof DenvError && err.code === "invalid_argument") throw err;
      // A connection the fetch policy refused is the administrator's to allow, not a bad token.
      const refused = refusalIn(err);
      if (refused) throw refused;
      throw new DenvError(
        "invalid_argument",
        `${body.provider === "aws" ? "AWS" : "Hetzner"} did not accept the token: ${(err as Error).message}`,
      );
    }
  await insertCloud(store, row);
  return row;
}

/** Disconnects an account (its machines are left as they are); refused while its sandboxes run. */
export async function disconnectCloud(
  deps: Pick<HostedDeps, "store">,
  teamId: string,
  name: string,
): Promise<void> {
  // A hosted provider's sandboxes would run on with no key to reach or destroy them.
  const cloud = (await teamClouds(deps.store, teamId)).find((x) => x.name === name);
  const running =
    cloud && isHosted(cloud.provider) ? await environmentsAtTarget(deps.store, teamId, name) : [];
  if (running.length)
    throw new DenvError("conflict", `cloud ${name} still runs ${running.join(", ")}: destroy them first`);
  if (!(await deleteCloud(deps.store, teamId, name))) throw new DenvError("not_found", `no cloud ${name}`);
}
