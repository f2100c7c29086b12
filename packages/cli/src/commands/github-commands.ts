/** GitHub: the team's App, the repositories its installations give, and the deliveries it got. */
import { readFileSync } from "node:fs";
import type { Command } from "commander";
import { printJson, printTable, UsageError } from "../output.ts";
import { run } from "./command-runner.ts";

export function registerGithubCommands(program: Command): void {
  const gh = program
    .command("github")
    .description("GitHub: connect the team's GitHub App; its pushes and pull requests deploy");
  const connect = gh
    .command("connect")
    .description(
      "Connect the team's GitHub App (checked against GitHub, its key and secret stored encrypted); then install it on your repositories",
    )
    .requiredOption("--app-id <id>", "the App's ID (its settings page: App ID)")
    .requiredOption("--private-key <file>", "the App's private key (.pem) as GitHub generated it")
    .option("--webhook-secret <secret>", "the webhook secret set on the App")
    .option("--webhook-secret-file <file>", "read the webhook secret from a file instead")
    .option("--api-url <url>", "GitHub Enterprise Server's API (https://HOST/api/v3); default api.github.com")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExample:\n  denv github connect --app-id 123456 --private-key ./denv-app.private-key.pem --webhook-secret-file ./webhook-secret\n\nOn github.com, make the App first (Settings > Developer settings > GitHub Apps > New GitHub App):\n  webhook URL  https://YOUR-DENV/v1/github/webhook, with a secret of 16 or more characters\n  permissions  Contents: read, Checks: read and write, Deployments: read and write, Metadata: read\n  events       Push, Pull request",
    );
  connect.action(
    run(connect, async (client, json) => {
      const o = connect.opts() as {
        appId: string;
        privateKey: string;
        webhookSecret?: string;
        webhookSecretFile?: string;
        apiUrl?: string;
      };
      if ((o.webhookSecret === undefined) === (o.webhookSecretFile === undefined))
        throw new UsageError("give one of --webhook-secret or --webhook-secret-file");
      const secret =
        o.webhookSecret ?? readText(o.webhookSecretFile as string, "--webhook-secret-file").trim();
      const r = await client().github.connectApp({
        app_id: o.appId,
        private_key: readText(o.privateKey, "--private-key"),
        webhook_secret: secret,
        ...(o.apiUrl ? { api_url: o.apiUrl } : {}),
      });
      if (json) printJson(r);
      else
        process.stdout.write(
          `connected GitHub App ${r.slug} (${r.app_id})\n  webhook URL: ${r.webhook_url}\n  install it: ${r.install_url}\nthen: denv project create --kind rl-environment --source github:OWNER/REPO NAME\n`,
        );
      return 0;
    }),
  );
  const apps = gh
    .command("apps")
    .description("The team's connected GitHub Apps")
    .option("--json", "print JSON");
  apps.action(
    run(apps, async (client, json) => {
      const r = await client().github.apps();
      if (json) printJson(r);
      else {
        printTable(
          ["APP ID", "SLUG", "WEBHOOK URL", "INSTALL"],
          r.apps.map((a) => [String(a.app_id), a.slug, a.webhook_url, a.install_url]),
        );
      }
      return 0;
    }),
  );
  const disconnect = gh
    .command("disconnect")
    .description("Disconnect a GitHub App (refused while a project reads through it)")
    .argument("<app-id>", "the App's ID")
    .option("--json", "print JSON");
  disconnect.action(
    run(disconnect, async (client, json, appId: string) => {
      const r = await client().github.disconnectApp(appId);
      if (json) printJson(r);
      else process.stdout.write(`disconnected GitHub App ${r.deleted}\n`);
      return 0;
    }),
  );
  const repos = gh
    .command("repos")
    .description("The repositories the App's installations give denv")
    .option("--json", "print JSON");
  repos.action(
    run(repos, async (client, json) => {
      const r = await client().github.repositories();
      if (json) printJson(r);
      else {
        printTable(
          ["REPOSITORY", "DEFAULT BRANCH", "ACCOUNT", "INSTALLATION"],
          r.installations.flatMap((i) =>
            i.repositories.map((repo) => [
              repo.full_name,
              repo.default_branch,
              i.account,
              String(i.installation_id),
            ]),
          ),
        );
      }
      return 0;
    }),
  );
  const deliveries = gh
    .command("deliveries")
    .description("The latest webhook deliveries and what denv did with each")
    .option("--json", "print JSON");
  deliveries.action(
    run(deliveries, async (client, json) => {
      const r = await client().github.deliveries();
      if (json) printJson(r);
      else
        printTable(
          ["RECEIVED", "EVENT", "DELIVERY", "OUTCOME"],
          r.deliveries.map((d) => [d.received_at, d.event, d.delivery_id, d.outcome]),
        );
      return 0;
    }),
  );
}

function readText(path: string, what: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    throw new UsageError(
      `${what}: ${path} could not be read (${(err as NodeJS.ErrnoException).code ?? err})`,
    );
  }
}
