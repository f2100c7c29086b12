/**
 * The commands that talk to a denv server through the SDK: login, project, deploy, fork, snapshot,
 * exec, files, rollback, host, env, deployment. Every one takes --json; human output shows
 * progress for anything long; errors say what to do next.
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { basename, dirname, join, posix, resolve } from "node:path";
import { Readable } from "node:stream";
import { DenvClient, type Operations } from "@denv/sdk";
import type { Command } from "commander";
import tar from "tar-stream";
import { clientFrom, readConfig, writeConfig } from "../config.ts";
import { printJson, reportError, UsageError } from "../output.ts";
import { findComposeFile } from "./validate.ts";

type Deployment = Operations["getV1DeploymentsById"]["response"];
type Phase = Deployment["phases"][number];
interface GlobalOpts {
  server?: string;
  apiKey?: string;
  json?: boolean;
}

/** Wraps a command's action: the client from global options, errors mapped to exit codes. */
function run<A extends unknown[]>(
  cmd: Command,
  fn: (client: () => DenvClient, json: boolean, ...args: A) => Promise<number | undefined>,
) {
  return async (...args: A) => {
    const opts = cmd.optsWithGlobals() as GlobalOpts;
    const json = opts.json === true;
    try {
      process.exitCode = (await fn(() => clientFrom(opts), json, ...args)) ?? 0;
    } catch (err) {
      process.exitCode = reportError(err, json);
    }
  };
}

const envParam = (ref: string) => ({ id: ref });

function phaseLine(p: Phase): string {
  const mark = { pending: "·", running: "…", succeeded: "✓", failed: "✗", skipped: "-" }[p.status];
  const ms = p.duration_ms !== null && p.status !== "skipped" ? ` ${p.duration_ms} ms` : "";
  return `  ${mark} ${p.name.padEnd(10)}${ms}${p.reason ? `  (${p.reason})` : ""}`;
}

export function printPhaseLog(d: Deployment, withEvidence: boolean): void {
  process.stdout.write(`deployment ${d.id} (${d.kind}) ${d.status}${d.reason ? `: ${d.reason}` : ""}\n`);
  for (const p of d.phases) {
    process.stdout.write(`${phaseLine(p)}\n`);
    if (withEvidence && p.evidence !== null && p.evidence !== undefined) {
      const text = JSON.stringify(p.evidence);
      process.stdout.write(`      evidence: ${text.length > 400 ? `${text.slice(0, 400)}…` : text}\n`);
    }
  }
}

/** Follows a deployment's phases live, printing each change; resolves to the final deployment. */
async function follow(client: DenvClient, id: string, json: boolean): Promise<Deployment> {
  const printed = new Map<string, string>();
  let last: Deployment | undefined;
  for await (const d of client.deploymentEvents(id)) {
    last = d;
    if (json) continue;
    for (const p of d.phases) {
      if (p.status === "pending") continue;
      const line = phaseLine(p);
      if (printed.get(p.name) !== line) {
        printed.set(p.name, line);
        process.stdout.write(`${line}\n`);
      }
    }
  }
  return last ?? (await client.call("getV1DeploymentsById", { params: { id } }));
}

export function registerApiCommands(program: Command): void {
  program.option("--server <url>", "the denv server (default: DENV_SERVER, then `denv login`'s)");
  program.option("--api-key <key>", "the API key (default: DENV_API_KEY, then `denv login`'s)");

  const login = program
    .command("login")
    .description("Save the server and API key this CLI uses, after checking them")
    .option("--json", "print JSON");
  login.action(
    run(login, async (_c, json) => {
      const o = login.optsWithGlobals() as GlobalOpts;
      const server = o.server ?? process.env.DENV_SERVER ?? readConfig().server;
      const apiKey = o.apiKey ?? process.env.DENV_API_KEY;
      if (!server) throw new UsageError("give --server URL (`denv up` prints it)");
      if (!apiKey) throw new UsageError("give --api-key KEY or set DENV_API_KEY (`denv up` prints the key)");
      const client = new DenvClient({ baseUrl: server, apiKey });
      const hosts = await client.call("getV1Hosts", {});
      const path = writeConfig({ server, api_key: apiKey });
      if (json) printJson({ ok: true, server, config: path, hosts: hosts.hosts.length });
      else process.stdout.write(`logged in to ${server} (${hosts.hosts.length} host(s)); saved to ${path}\n`);
      return 0;
    }),
  );
  login.addHelpText("after", "\nExample:\n  denv login --server http://127.0.0.1:7070 --api-key dk_...");

  // --- projects ---
  const project = program.command("project").description("Projects: a compose file with a kind and a source");
  const create = project
    .command("create")
    .description("Create a project (and upload a local source)")
    .argument("<name>", "project name")
    .requiredOption("--kind <kind>", "rl-environment, agent, service, website or inference")
    .requiredOption("--source <source>", "a local directory, any git URL, or github:owner/repo")
    .option("--pin <target>", "always place on this host")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExamples:\n  denv project create --kind rl-environment --source ./examples/ops-world ops-world\n  denv project create --kind rl-environment --source github:you/ops-world ops-world",
    );
  create.action(
    run(create, async (client, json, name: string, o: { kind: string; source: string; pin?: string }) => {
      const isLocal = !/^github:|^(https?|git|ssh|file):\/\/|^[\w.-]+@[\w.-]+:/.test(o.source);
      const source = isLocal ? resolve(o.source) : o.source;
      if (isLocal) findComposeFile(source); // refuse a directory with no compose file before creating anything
      let p = await client().call("postV1Projects", {
        body: { name, kind: o.kind as "rl-environment", source, ...(o.pin ? { pinned_target: o.pin } : {}) },
      });
      if (isLocal) p = await uploadSource(client(), name, source);
      if (json) printJson(p);
      else
        process.stdout.write(`created project ${p.name} (${p.kind}, ${p.source_type} source ${p.source})\n`);
      return 0;
    }),
  );
  const plist = project.command("list").description("List projects").option("--json", "print JSON");
  plist.action(
    run(plist, async (client, json) => {
      const r = await client().call("getV1Projects", {});
      if (json) printJson(r);
      else
        for (const p of r.projects)
          process.stdout.write(`${p.name}\t${p.kind}\t${p.source_type}\t${p.source}\n`);
      return 0;
    }),
  );

  // --- deploy ---
  const deploy = program
    .command("deploy")
    .description("Deploy a project to an environment, in recorded phases")
    .requiredOption("--project <name>", "the project")
    .option("--env <name>", "the environment", "alpha")
    .option("--wait", "follow the phases live until the verdict")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExample:\n  denv deploy --project ops-world --env alpha --wait\n\nExits 1 when the deployment ends rolled_back.",
    );
  deploy.action(
    run(deploy, async (client, json, o: { project: string; env: string; wait?: boolean }) => {
      const c = client();
      const p = await c.call("getV1ProjectsById", { params: { id: o.project } });
      if (p.source_type === "local") await uploadSource(c, p.name, p.source);
      const d = await c.call("postV1ProjectsByIdDeploy", { params: { id: p.name }, body: { env: o.env } });
      if (!o.wait) {
        if (json) printJson(d);
        else
          process.stdout.write(
            `deployment ${d.id} started; follow it with \`denv deployment show ${d.id}\`\n`,
          );
        return 0;
      }
      if (!json) process.stdout.write(`deploying ${p.name} to ${o.env} (deployment ${d.id})\n`);
      const final = await follow(c, d.id, json);
      if (json) printJson(final);
      else process.stdout.write(`${final.status}${final.reason ? `: ${final.reason}` : ""}\n`);
      return final.status === "succeeded" ? 0 : 1;
    }),
  );

  // --- fork, snapshot, rollback ---
  const fork = program
    .command("fork")
    .description("A new environment from an environment's current version")
    .argument("<env>", "the environment to fork")
    .requiredOption("--name <name>", "the new environment's name")
    .option("--json", "print JSON")
    .addHelpText("after", "\nExample:\n  denv fork --name rollout-017 alpha");
  fork.action(
    run(fork, async (client, json, env: string, o: { name: string }) => {
      const t = performance.now();
      if (!json) process.stderr.write(`forking ${env} → ${o.name}…\n`);
      const e = await client().call("postV1EnvsByIdFork", { params: envParam(env), body: { name: o.name } });
      if (json) printJson(e);
      else
        process.stdout.write(
          `forked ${env} → ${e.name} (${e.id}) from ${e.parent_version_id} in ${Math.round(performance.now() - t)} ms\n`,
        );
      return 0;
    }),
  );
  const snapshot = program
    .command("snapshot")
    .description("Capture an environment's live state as a new version")
    .argument("<env>")
    .option("--json", "print JSON")
    .addHelpText("after", "\nExample:\n  denv snapshot rollout-017");
  snapshot.action(
    run(snapshot, async (client, json, env: string) => {
      if (!json) process.stderr.write(`snapshotting ${env}…\n`);
      const d = await client().call("postV1EnvsByIdSnapshot", { params: envParam(env) });
      if (json) printJson(d);
      else if (d.status === "succeeded")
        process.stdout.write(`snapshot of ${env}: version ${d.version_id} (frozen ${d.frozen_ms} ms)\n`);
      else process.stdout.write(`snapshot failed: ${d.reason}\n`);
      return d.status === "succeeded" ? 0 : 1;
    }),
  );
  const rollback = program
    .command("rollback")
    .description("Restore an environment to a version and re-check health")
    .argument("<env>")
    .argument("<version>")
    .option("--json", "print JSON")
    .addHelpText("after", "\nExample:\n  denv rollback alpha ver_0123456789ab");
  rollback.action(
    run(rollback, async (client, json, env: string, version: string) => {
      if (!json) process.stderr.write(`rolling ${env} back to ${version}…\n`);
      const d = await client().call("postV1EnvsByIdRollback", { params: envParam(env), body: { version } });
      if (json) printJson(d);
      else
        process.stdout.write(
          d.status === "succeeded" ? `rolled ${env} back to ${version}\n` : `rollback failed: ${d.reason}\n`,
        );
      return d.status === "succeeded" ? 0 : 1;
    }),
  );

  const verify = program
    .command("verify")
    .description("Grade an environment on a fork, as a separate principal; prints the reward")
    .argument("<env>")
    .option(
      "--resume",
      "let the agent's processes run again afterwards (default: left frozen for inspection)",
    )
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExample:\n  denv verify rollout-017\n\nThe reward is the number the verifier writes to $DENV_REWARD_FILE, or the last line of its stdout.",
    );
  verify.action(
    run(verify, async (client, json, env: string, o: { resume?: boolean }) => {
      if (!json) process.stderr.write(`verifying ${env}: stop, collect, snapshot, clone, grade…\n`);
      const d = await client().call("postV1EnvsByIdVerify", {
        params: envParam(env),
        body: { resume: o.resume === true },
      });
      if (json) printJson({ ...d, reward: d.verify?.reward ?? null });
      else {
        printPhaseLog(d, false);
        if (d.status === "succeeded" && d.verify)
          process.stdout.write(
            `reward ${d.verify.reward}${d.verify.reason ? ` (${d.verify.reason})` : ""}\n`,
          );
      }
      return d.status === "succeeded" ? 0 : 1;
    }),
  );

  // --- exec and files ---
  const exec = program
    .command("exec")
    .description("Run a command in an environment's service; its exit code passes through")
    .argument("<env>")
    .argument("<command...>", "after --")
    .option("--service <name>", "the service (default: the agent's)")
    .option("--user <user>", "run as this user")
    .option("--cwd <dir>", "working directory")
    .option("--timeout <ms>", "kill the command's process tree after this many ms")
    .option("--json", "print JSON (exit code, stdout, stderr)")
    .addHelpText(
      "after",
      '\nExample:\n  denv exec --service opsbox rollout-017 -- psql -c "select count(*) from orders"',
    );
  exec.action(
    run(
      exec,
      async (
        client,
        json,
        env: string,
        command: string[],
        o: { service?: string; user?: string; cwd?: string; timeout?: string },
      ) => {
        const stdin = process.stdin.isTTY || process.env.DENV_NO_STDIN ? undefined : await readStdinIfPiped();
        const body = {
          command,
          ...(o.service ? { service: o.service } : {}),
          ...(o.user ? { user: o.user } : {}),
          ...(o.cwd ? { cwd: o.cwd } : {}),
          ...(o.timeout ? { timeout_ms: Number(o.timeout) } : {}),
          ...(stdin?.length ? { stdin: stdin.toString("base64") } : {}),
          encoding: "base64" as const,
        };
        if (json) {
          const r = await client().call("postV1EnvsByIdExec", { params: envParam(env), body });
          const out = Buffer.from(r.stdout, "base64");
          const err = Buffer.from(r.stderr, "base64");
          printJson({ ...r, stdout: out.toString("utf8"), stderr: err.toString("utf8"), encoding: "utf8" });
          return r.exit_code;
        }
        // Output streams as the command writes it.
        const r = await client().execStream(env, body, (which, data) => {
          (which === "stdout" ? process.stdout : process.stderr).write(data);
        });
        if (r.timed_out)
          process.stderr.write(`denv: the command timed out after ${o.timeout} ms and was killed\n`);
        return r.exit_code;
      },
    ),
  );

  const files = program.command("files").description("Move files in and out of an environment's service");
  const put = files
    .command("put")
    .description("Copy a local file or directory to a path in the service")
    .argument("<env>")
    .argument("<local>")
    .argument("<remote>", "absolute path it lands at")
    .option("--service <name>", "the service (default: the agent's)")
    .option("--owner <uid:gid>", "owner of the files written", "0:0")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExample:\n  denv files put rollout-017 --service opsbox ./fixtures /home/ubuntu/fixtures",
    );
  put.action(
    run(
      put,
      async (
        client,
        json,
        env: string,
        local: string,
        remote: string,
        o: { service?: string; owner: string },
      ) => {
        if (!posix.isAbsolute(remote))
          throw new UsageError(`${remote} must be an absolute path in the service`);
        if (!existsSync(local)) throw new UsageError(`${local} does not exist`);
        const [uid = 0, gid = 0] = o.owner.split(":").map(Number);
        const body = await tarOf(local, posix.basename(remote), uid, gid);
        const r = await client().call("putV1EnvsByIdFiles", {
          params: envParam(env),
          query: { service: o.service, path: posix.dirname(remote) },
          body: new Uint8Array(body),
        });
        if (json) printJson(r);
        else process.stdout.write(`put ${local} → ${remote} (${r.entries} entries, ${r.bytes} bytes)\n`);
        return 0;
      },
    ),
  );
  const get = files
    .command("get")
    .description("Copy a path from the service to a local file or directory")
    .argument("<env>")
    .argument("<remote>")
    .argument("<local>", "a directory (ending in /, or existing) to copy into, or a file path")
    .option("--service <name>", "the service (default: the agent's)")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExample:\n  denv files get rollout-017 --service opsbox /home/ubuntu/answer.txt ./out/",
    );
  get.action(
    run(get, async (client, json, env: string, remote: string, local: string, o: { service?: string }) => {
      const body = await client().call("getV1EnvsByIdFiles", {
        params: envParam(env),
        query: { service: o.service, path: remote },
      });
      const intoDir = local.endsWith("/") || (existsSync(local) && statSync(local).isDirectory());
      const written = await untar(
        Buffer.from(body),
        intoDir ? local : dirname(local),
        intoDir ? null : basename(local),
      );
      if (json) printJson({ ok: true, files: written });
      else process.stdout.write(`got ${remote} → ${written.join(", ")}\n`);
      return 0;
    }),
  );

  // --- hosts ---
  const host = program.command("host").description("Hosts: machines with Docker running denvd");
  const jt = host
    .command("join-token")
    .description("Mint a single-use join token for a new host")
    .option("--json", "print JSON")
    .addHelpText("after", "\nThen on the host: denvd join --server URL --token TOKEN && denvd run");
  jt.action(
    run(jt, async (client, json) => {
      const r = await client().call("postV1HostsJoinToken", {});
      if (json) printJson(r);
      else process.stdout.write(`${r.token}\n`);
      return 0;
    }),
  );
  const hl = host.command("list").description("Hosts and what they reported").option("--json", "print JSON");
  hl.action(
    run(hl, async (client, json) => {
      const r = await client().call("getV1Hosts", {});
      if (json) printJson(r);
      else {
        process.stdout.write("ID\tNAME\tARCH\tSTORAGE\tCAPACITY\tVERSION\tCONNECTED\tLAST SEEN\n");
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
          process.stdout.write(
            `${h.id}\t${h.name}\t${h.arch ?? "-"}\t${h.storage ?? "-"}\t${capacity}\t${h.version ?? "-"}\t${h.connected}\t${h.last_seen ?? "-"}\n`,
          );
        }
      }
      return 0;
    }),
  );

  // --- clouds ---
  const cloud = program.command("cloud").description("Cloud accounts the provision phase creates hosts in");
  const cc = cloud
    .command("connect")
    .description("Connect a cloud account (hetzner); its token is checked, then stored encrypted")
    .argument("<provider>", "hetzner (aws: not yet available)")
    .requiredOption("--name <name>", "a name for this account (projects can be pinned to it)")
    .requiredOption("--token <token>", "the provider's API token")
    .option("--server-type <type>", "the machine type to create", "cx22")
    .option("--location <loc>", "where to create machines", "fsn1")
    .option("--api-url <url>", "another endpoint speaking the provider's API")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExample:\n  denv cloud connect hetzner --name hz --token $HCLOUD_TOKEN --server-type ax41-nvme --location fsn1",
    );
  cc.action(
    run(cc, async (client, json, provider: string) => {
      const o = cc.opts() as {
        name: string;
        token: string;
        serverType: string;
        location: string;
        apiUrl?: string;
      };
      const r = await client().call("postV1Clouds", {
        body: {
          provider,
          name: o.name,
          token: o.token,
          server_type: o.serverType,
          location: o.location,
          ...(o.apiUrl ? { api_url: o.apiUrl } : {}),
        },
      });
      if (json) printJson(r);
      else
        process.stdout.write(
          `connected ${r.provider} account ${r.name} (${r.server_type} in ${r.location}); deploys provision machines there when no host has capacity\n`,
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
      const r = await client().call("getV1Clouds", {});
      if (json) printJson(r);
      else {
        process.stdout.write("NAME\tPROVIDER\tSERVER TYPE\tLOCATION\tMACHINES\n");
        for (const c of r.clouds)
          process.stdout.write(
            `${c.name}\t${c.provider}\t${c.server_type}\t${c.location}\t${c.machines.map((m) => `${m.name}(${m.status})`).join(",") || "-"}\n`,
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
      const r = await client().call("deleteV1CloudsByName", { params: { name } });
      if (json) printJson(r);
      else process.stdout.write(`disconnected ${r.deleted}\n`);
      return 0;
    }),
  );

  // --- environments and deployments ---
  const env = program.command("env").description("Environments");
  const el = env.command("list").description("List environments").option("--json", "print JSON");
  el.action(
    run(el, async (client, json) => {
      const r = await client().call("getV1Envs", {});
      if (json) printJson(r);
      else {
        process.stdout.write("ID\tPROJECT\tNAME\tSTATUS\tVERSION\n");
        for (const e of r.environments)
          process.stdout.write(
            `${e.id}\t${e.project}\t${e.name}\t${e.status}\t${e.current_version_id ?? "-"}\n`,
          );
      }
      return 0;
    }),
  );
  const es = env
    .command("show")
    .description("An environment and its deployments")
    .argument("<env>")
    .option("--json", "print JSON");
  es.action(
    run(es, async (client, json, ref: string) => {
      const e = await client().call("getV1EnvsById", { params: envParam(ref) });
      const deps = await client().call("getV1EnvsByIdDeployments", { params: { id: e.id } });
      if (json) printJson({ ...e, deployments: deps.deployments });
      else {
        process.stdout.write(
          `${e.project}/${e.name} (${e.id}) ${e.status}\n  version ${e.current_version_id ?? "-"}  parent ${e.parent_version_id ?? "-"}\n  services ${e.services.join(", ")}\n`,
        );
        for (const d of deps.deployments)
          process.stdout.write(`  ${d.created_at} ${d.kind.padEnd(9)} ${d.status} ${d.id}\n`);
      }
      return 0;
    }),
  );
  const ed = env
    .command("destroy")
    .description("Destroy an environment (its versions stay)")
    .argument("<env>")
    .option("--json", "print JSON");
  ed.action(
    run(ed, async (client, json, ref: string) => {
      const d = await client().call("deleteV1EnvsById", { params: envParam(ref) });
      if (json) printJson(d);
      else
        process.stdout.write(
          d.status === "succeeded" ? `destroyed ${ref}\n` : `destroy failed: ${d.reason}\n`,
        );
      return d.status === "succeeded" ? 0 : 1;
    }),
  );
  const dep = program.command("deployment").description("Deployments");
  const ds = dep
    .command("show")
    .description("A deployment's phase log with its evidence")
    .argument("<id>")
    .option("--json", "print JSON");
  ds.action(
    run(ds, async (client, json, id: string) => {
      const d = await client().call("getV1DeploymentsById", { params: { id } });
      if (json) printJson(d);
      else printPhaseLog(d, true);
      return 0;
    }),
  );
}

async function uploadSource(client: DenvClient, project: string, dir: string) {
  const file = findComposeFile(dir);
  const dotenv = join(dirname(file), ".env");
  return client.call("putV1ProjectsByIdSource", {
    params: { id: project },
    body: {
      compose: readFileSync(file, "utf8"),
      ...(existsSync(dotenv) ? { dotenv: readFileSync(dotenv, "utf8") } : {}),
    },
  });
}

async function readStdinIfPiped(): Promise<Buffer | undefined> {
  if (process.stdin.isTTY) return undefined;
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

/** A tar of a local file or directory whose top entry is named `top`. */
async function tarOf(local: string, top: string, uid: number, gid: number): Promise<Buffer> {
  const pack = tar.pack();
  const add = (path: string, name: string): void => {
    const st = statSync(path);
    if (st.isDirectory()) {
      pack.entry({ name, type: "directory", mode: st.mode & 0o7777, uid, gid });
      for (const child of readdirSorted(path)) add(join(path, child), `${name}/${child}`);
    } else if (st.isFile()) {
      pack.entry({ name, mode: st.mode & 0o7777, uid, gid }, readFileSync(path));
    }
  };
  add(local, top);
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

function readdirSorted(dir: string): string[] {
  return readdirSync(dir).sort();
}

/** Extracts files and directories (links and special files are skipped) under `into`. */
async function untar(body: Buffer, into: string, rename: string | null): Promise<string[]> {
  // Loaded here: @denv/denvd brings the Docker client, which every other command would pay for.
  const { checkEntryName } = await import("@denv/denvd");
  const written: string[] = [];
  const extract = tar.extract();
  extract.on("entry", (header, stream, next) => {
    const chunks: Buffer[] = [];
    stream.on("data", (c: unknown) => {
      chunks.push(c as Buffer);
    });
    stream.on("end", () => {
      try {
        let name = checkEntryName(header.name);
        if (rename) name = [rename, ...name.split("/").slice(1)].join("/");
        const target = join(into, name);
        if (header.type === "directory") mkdirSync(target, { recursive: true });
        else if (header.type === "file") {
          mkdirSync(dirname(target), { recursive: true });
          writeFileSync(target, Buffer.concat(chunks));
          written.push(target);
        }
        next();
      } catch (err) {
        next(err as Error);
      }
    });
  });
  await new Promise<void>((resolvePromise, reject) => {
    extract.on("finish", () => resolvePromise());
    extract.on("error", reject);
    Readable.from(body).pipe(extract);
  });
  return written;
}
