/** Hosts and clouds: join tokens, what hosts reported, and cloud accounts. */
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import type { Command } from "commander";
import { ageOf, printJson, printTable, UsageError } from "../output.ts";
import { run } from "./command-runner.ts";

export function registerHostCommands(program: Command): void {
  // --- hosts ---
  const host = program.command("host").description("Hosts: machines with Docker running denvd");
  const jt = host
    .command("join-token")
    .description("Mint a single-use join token for a new host")
    .option("--json", "print JSON")
    .addHelpText("after", "\nThen on the host: denvd join --server URL --token TOKEN && denvd run");
  jt.action(
    run(jt, async (client, json) => {
      const r = await client().hosts.joinToken();
      if (json) printJson(r);
      else process.stdout.write(`${r.token}\n`);
      return 0;
    }),
  );
  const hl = host
    .command("list")
    .description("Hosts, what they reported, and the environments, versions and warm pools each holds")
    .option("--json", "print JSON");
  hl.action(
    run(hl, async (client, json) => {
      const r = await client().hosts.list();
      if (json) printJson(r);
      else {
        const rows: string[][] = [];
        for (const h of r.hosts) {
          const cap = h.capacity as {
            free_bytes?: number;
            total_bytes?: number;
            cpus?: number;
            memory_bytes?: number;
          } | null;
          const gib = (n?: number) => (n ? `${Math.round(n / 1024 ** 3)}GiB` : "-");
          const capacity = cap
            ? `${gib(cap.free_bytes)} free of ${gib(cap.total_bytes)}, ${cap.cpus ?? "-"} cpu, ${gib(cap.memory_bytes)} mem`
            : "-";
          // Versions by id (the newest three, then how many more); pools as version ready/size. A
          // server older than this CLI answers without them: shown as "-".
          const held = h as Partial<Pick<typeof h, "versions" | "pools" | "environments">>;
          const vs = held.versions ?? [];
          const versions = vs.length
            ? `${vs.slice(0, 3).join(",")}${vs.length > 3 ? ` +${vs.length - 3}` : ""}`
            : "-";
          // GPUs: how many, which model, how the engine passes them; none, saying so.
          const g = (h as { gpus?: (typeof h)["gpus"] }).gpus;
          const gpus = !g
            ? "-"
            : g.devices.length
              ? `${g.devices.length}x ${g.devices[0]?.model} (${g.mode === "none" ? "not usable" : g.mode}, driver ${g.driver_version})`
              : "none";
          const ps = held.pools ?? [];
          const pools = ps.length ? ps.map((p) => `${p.version_id} ${p.ready}/${p.size}`).join(",") : "-";
          rows.push([
            h.id,
            h.name,
            h.arch ?? "-",
            h.storage ?? "-",
            capacity,
            gpus,
            h.version ?? "-",
            `${h.connected}${(h as { draining?: boolean }).draining ? " (draining)" : ""}`,
            h.last_seen ? ageOf(h.last_seen) : "-",
            String(held.environments ?? "-"),
            versions,
            pools,
          ]);
        }
        printTable(
          [
            "ID",
            "NAME",
            "ARCH",
            "STORAGE",
            "CAPACITY",
            "GPUS",
            "VERSION",
            "CONNECTED",
            "LAST SEEN",
            "ENVS",
            "VERSIONS",
            "POOLS",
          ],
          rows,
        );
      }
      return 0;
    }),
  );

  const drain = host
    .command("drain")
    .description(
      "Before maintenance: the host takes nothing new; versions it holds are copied to other hosts where it held too few copies; its ready pool members move",
    )
    .argument("<host>", "the host's name or id")
    .option("--undo", "take new environments, replicas and pool members again")
    .option("--json", "print JSON");
  drain.action(
    run(drain, async (client, json, ref: string, o: { undo?: boolean }) => {
      if (o.undo) {
        const r = await client().hosts.undrain(ref);
        if (json) printJson(r);
        else process.stdout.write(`${ref} takes new work again\n`);
        return 0;
      }
      const r = await client().hosts.drain(ref);
      if (json) printJson(r);
      else {
        process.stdout.write(
          `${ref} drained: ${r.replicated.length} version copies made elsewhere, ${r.pool_members_moved} pool member(s) moved\n`,
        );
        for (const n of r.not_replicated) process.stdout.write(`not copied: ${n.version_id}: ${n.reason}\n`);
      }
      return r.not_replicated.length ? 1 : 0;
    }),
  );

  // --- clouds ---
  const cloud = program.command("cloud").description("Cloud accounts the provision phase creates hosts in");
  const cc = cloud
    .command("connect")
    .description(
      "Connect a cloud account: hetzner or aws (deploys provision machines there), or e2b, daytona, modal or prime (a target of its own); its token is checked, then stored encrypted",
    )
    .argument("<provider>", "hetzner, aws, e2b, daytona, modal or prime")
    .requiredOption(
      "--name <name>",
      "a name for this account (projects can be pinned to it; an e2b, daytona, modal or prime account is the target of that name)",
    )
    // Not --api-key: that is denv's own key, an option of every command.
    .option("--token <token>", "the provider's API token or key (aws: ACCESS_KEY_ID:SECRET_ACCESS_KEY)")
    .option("--profile <name>", "aws: read the key pair of this profile from ~/.aws/credentials instead")
    .option(
      "--server-type <type>",
      "hetzner: the machine type to create (default cx22); aws: the instance type (default m7i.large)",
    )
    .option(
      "--location <loc>",
      "hetzner: where to create machines (default fsn1); aws: the region (default us-east-1); daytona, prime: its region (default us)",
    )
    .option("--api-url <url>", "another endpoint speaking the provider's API (for e2b, its sandboxes' too)")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExamples:\n  denv cloud connect hetzner --name hz --token $HCLOUD_TOKEN --server-type ax41-nvme --location fsn1\n  denv cloud connect aws --name aws --profile default --server-type m7i.xlarge --location eu-central-1\n  denv cloud connect e2b --name e2b --token $E2B_API_KEY\n  denv cloud connect daytona --name daytona --token $DAYTONA_API_KEY\n  denv cloud connect modal --name modal --token $MODAL_TOKEN_ID:$MODAL_TOKEN_SECRET\n  denv cloud connect prime --name prime --token $PRIME_API_KEY",
    );
  cc.action(
    run(cc, async (client, json, provider: string) => {
      const o = cc.opts() as {
        name: string;
        token?: string;
        profile?: string;
        serverType?: string;
        location?: string;
        apiUrl?: string;
      };
      if ((o.token === undefined) === (o.profile === undefined))
        throw new UsageError("give one of --token or --profile (aws)");
      if (o.profile !== undefined && provider !== "aws")
        throw new UsageError("--profile reads an AWS key pair: it goes with aws");
      const token = o.token ?? awsProfileToken(o.profile as string);
      const machines = provider === "hetzner" || provider === "aws";
      const defaults =
        provider === "aws" ? { type: "m7i.large", at: "us-east-1" } : { type: "cx22", at: "fsn1" };
      const r = await client().clouds.connect({
        provider,
        name: o.name,
        token,
        ...(machines
          ? { server_type: o.serverType ?? defaults.type, location: o.location ?? defaults.at }
          : {}),
        ...(!machines && o.location ? { location: o.location } : {}),
        ...(o.apiUrl ? { api_url: o.apiUrl } : {}),
      });
      if (json) printJson(r);
      else
        process.stdout.write(
          machines
            ? `connected ${r.provider} account ${r.name} (${r.server_type} in ${r.location}); deploys provision machines there when no host has capacity\n`
            : `connected ${r.provider} account ${r.name}: target ${r.name} (GET /v1/targets shows what it can do)\n`,
        );
      return 0;
    }),
  );
  const cl = cloud
    .command("list")
    .description("Connected cloud accounts and their machines")
    .option("--json", "print JSON");
  cl.action(
    run(cl, async (client, json) => {
      const r = await client().clouds.list();
      if (json) printJson(r);
      else {
        printTable(
          ["NAME", "PROVIDER", "SERVER TYPE", "LOCATION", "MACHINES"],
          r.clouds.map((c) => [
            c.name,
            c.provider,
            c.server_type,
            c.location,
            c.machines.map((m) => `${m.name}(${m.status})`).join(",") || "-",
          ]),
        );
      }
      return 0;
    }),
  );
  const cd = cloud
    .command("disconnect")
    .description("Forget a cloud account (machines it has are left running)")
    .argument("<name>")
    .option("--json", "print JSON");
  cd.action(
    run(cd, async (client, json, name: string) => {
      const r = await client().clouds.disconnect(name);
      if (json) printJson(r);
      else process.stdout.write(`disconnected ${r.deleted}\n`);
      return 0;
    }),
  );
}

/**
 * A profile's key pair from ~/.aws/credentials (or AWS_SHARED_CREDENTIALS_FILE), as the server
 * takes it: ACCESS_KEY_ID:SECRET_ACCESS_KEY. Read here, on the caller's machine; the server stores
 * it sealed and never reads an AWS configuration of its own.
 */
function awsProfileToken(profile: string): string {
  const file = process.env.AWS_SHARED_CREDENTIALS_FILE ?? join(homedir(), ".aws", "credentials");
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    throw new UsageError(`--profile ${profile}: ${file} cannot be read`);
  }
  let section: string | null = null;
  const keys: Record<string, string> = {};
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (!line || line.startsWith("#") || line.startsWith(";")) continue;
    const head = /^\[\s*(?:profile\s+)?([^\]]+?)\s*\]$/.exec(line);
    if (head) {
      section = head[1] ?? null;
      continue;
    }
    const kv = /^([A-Za-z_]+)\s*=\s*(.*)$/.exec(line);
    if (kv && section === profile) keys[(kv[1] as string).toLowerCase()] = (kv[2] as string).trim();
  }
  const id = keys.aws_access_key_id;
  const secret = keys.aws_secret_access_key;
  if (!id || !secret) throw new UsageError(`--profile ${profile}: ${file} has no key pair for it`);
  if (keys.aws_session_token)
    throw new UsageError(
      `--profile ${profile} holds temporary credentials (a session token): give a key pair that does not expire`,
    );
  return `${id}:${secret}`;
}
