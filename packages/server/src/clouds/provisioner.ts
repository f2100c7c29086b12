/**
 * The provision phase: when no connected host has capacity, a machine is created in the team's
 * cloud account with cloud-init user data that installs Docker and then denvd through this
 * server's installer, joining with a fresh single-use token. The join phase waits for it by name.
 * Machines carry the label denv=host; failed provisioning deletes what it created.
 */
import { randomBytes } from "node:crypto";
import { DenvError } from "@denv/protocol";
import type { FetchPolicy } from "../fetch-policy.ts";
import { newId, now } from "../ids.ts";
import { heldToPolicy } from "../outbound-guard.ts";
import {
  cloudById,
  cloudMachineById,
  cloudMachines,
  insertCloudMachine,
  markMachineDeleted,
  markMachineJoined,
  teamClouds,
} from "../store/cloud-store.ts";
import { teamHostNamed } from "../store/host-store.ts";
import type { Store } from "../store/open-store.ts";
import type { CloudsTable } from "../store/schema.ts";
import { createJoinToken } from "../store/team-store.ts";
import type { HostPresence } from "../targets/stack-lifecycle.ts";
import { AwsDriver } from "./aws-driver.ts";
import { checkCloudApiUrl, HetznerDriver } from "./hetzner-driver.ts";
import type { MachineDriver } from "./machine-driver.ts";
import type { SecretBox } from "./secret-box.ts";

export const PROVIDERS = ["hetzner", "aws"] as const;

/** The seed's words for providers that are not there yet. */
export const NOT_YET: Record<string, string> = {};

export const MACHINE_IMAGE = "debian-12";

export interface ProvisionedMachine {
  machine_id: string;
  cloud_id: string;
  server_id: number | string;
  name: string;
}

/** cloud-init user data (a shell script, which cloud-init runs once at first boot). */
export function userData(o: { serverUrl: string; token: string; name: string }): string {
  const q = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;
  return [
    "#!/bin/sh",
    "# denv host bootstrap (cloud-init user data): Docker, then denvd through the server's installer.",
    "set -e",
    "if ! command -v docker >/dev/null 2>&1; then",
    "  apt-get update -qq",
    "  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io curl ca-certificates",
    "  systemctl enable --now docker 2>/dev/null || true",
    "fi",
    `curl -fsSL ${q(`${o.serverUrl}/install.sh`)} | sh -s -- --token ${q(o.token)} --server ${q(o.serverUrl)} --name ${q(o.name)}`,
    "",
  ].join("\n");
}

/** The driver of a cloud that makes machines; its endpoint checked again at each use (the administrator may have narrowed what the server fetches). */
export function machineDriver(
  provider: string,
  token: string,
  cloud: Pick<CloudsTable, "api_url" | "location">,
  fetchPolicy: FetchPolicy,
): MachineDriver {
  const apiUrl = checkCloudApiUrl(cloud.api_url, fetchPolicy);
  // Every connection the driver (or AWS's SDK) opens is held to the policy (outbound-guard.ts).
  if (provider === "hetzner")
    return heldToPolicy(new HetznerDriver({ token, apiUrl }), fetchPolicy, "the Hetzner cloud");
  if (provider === "aws")
    return heldToPolicy(
      new AwsDriver({ token, region: cloud.location, apiUrl }),
      // AWS's own regional endpoints when the team named none.
      apiUrl ? fetchPolicy : fetchPolicy.with(["*.amazonaws.com"]),
      "the AWS cloud",
    );
  throw new DenvError("invalid_argument", `no driver for ${provider}`);
}

export class Provisioner {
  private readonly store: Store;
  private readonly secrets: SecretBox;
  private readonly serverUrl: () => string;
  private readonly fetchPolicy: FetchPolicy;

  constructor(options: {
    store: Store;
    secrets: SecretBox;
    serverUrl: () => string;
    fetchPolicy: FetchPolicy;
  }) {
    this.store = options.store;
    this.secrets = options.secrets;
    this.serverUrl = options.serverUrl;
    this.fetchPolicy = options.fetchPolicy;
  }

  async clouds(teamId: string): Promise<CloudsTable[]> {
    return teamClouds(this.store, teamId);
  }

  /** Names of the hosts a cloud's machines joined as (machines still alive). */
  async hostNamesOf(cloudId: string): Promise<string[]> {
    return (await cloudMachines(this.store, cloudId)).map((r) => r.name);
  }

  private driver(cloud: CloudsTable): MachineDriver {
    return machineDriver(cloud.provider, this.secrets.open(cloud.token_sealed), cloud, this.fetchPolicy);
  }

  /** Creates the machine; the caller records it in the deployment first thing. */
  async create(
    cloud: CloudsTable,
    deploymentId: string,
    record: (m: ProvisionedMachine) => Promise<void>,
  ): Promise<{ machine: ProvisionedMachine; evidence: Record<string, unknown> }> {
    const serverUrl = this.serverUrl();
    if (/^https?:\/\/(127\.|localhost|\[::1\])/.test(serverUrl))
      throw new DenvError(
        "invalid_argument",
        `a new machine cannot reach this server at ${serverUrl}: start it with --public-url (or DENV_PUBLIC_URL) set to an address machines in ${cloud.name} can reach`,
      );
    const name = `denv-${randomBytes(4).toString("hex")}`;
    const { token } = await createJoinToken(this.store, cloud.team_id, 3600_000);
    const server = await this.driver(cloud).createServer({
      name,
      serverType: cloud.server_type,
      location: cloud.location,
      image: MACHINE_IMAGE,
      userData: userData({ serverUrl, token, name }),
      labels: { denv: "host", "denv-team": cloud.team_id, "denv-deployment": deploymentId },
    });
    const machine: ProvisionedMachine = {
      machine_id: newId("cm"),
      cloud_id: cloud.id,
      server_id: server.id,
      name,
    };
    await insertCloudMachine(this.store, {
      id: machine.machine_id,
      team_id: cloud.team_id,
      cloud_id: cloud.id,
      provider_server_id: String(server.id),
      name,
      status: "creating",
      deployment_id: deploymentId,
      created_at: now(),
      deleted_at: null,
    });
    await record(machine);
    return {
      machine,
      evidence: {
        cloud: cloud.name,
        provider: cloud.provider,
        server_id: server.id,
        name,
        server_type: cloud.server_type,
        location: cloud.location,
        image: MACHINE_IMAGE,
        labels: { denv: "host" },
      },
    };
  }

  /** Resolves to the host id once a host of that name has joined and connected. */
  async waitJoined(teamId: string, name: string, hosts: HostPresence, timeoutMs: number): Promise<string> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      const host = await teamHostNamed(this.store, teamId, name);
      if (host && hosts.hostConnected(host.id)) {
        await markMachineJoined(this.store, name);
        return host.id;
      }
      await new Promise((r) => setTimeout(r, 500));
    }
    throw new DenvError("timeout", `machine ${name} did not join within ${Math.round(timeoutMs / 1000)} s`);
  }

  /** Deletes the machine in its cloud (idempotent) and the host record it may have made. */
  async remove(machineId: string): Promise<void> {
    const m = await cloudMachineById(this.store, machineId);
    if (!m || m.deleted_at) return;
    const cloud = await cloudById(this.store, m.cloud_id);
    if (cloud) await this.driver(cloud).deleteServer(m.provider_server_id);
    await markMachineDeleted(this.store, m);
  }
}
