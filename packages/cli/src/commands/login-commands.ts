/**
 * `denv login [SERVER]` and `denv logout`. Without a key, login is a device login: the CLI shows a
 * URL and a short code (and opens a browser when there is a desktop), a person approves it in the
 * console, and the CLI receives a new API key of that person's team, named after this machine,
 * saved with mode 0600. `--api-key` (or DENV_API_KEY) keeps working for scripts. `denv logout`
 * revokes the saved key on the server and forgets it.
 */
import { spawn } from "node:child_process";
import { hostname, userInfo } from "node:os";
import { DenvError } from "@denv/protocol/errors";
import { DenvClient } from "@denv/sdk";
import type { Command } from "commander";
import { readConfig, writeConfig } from "../config.ts";
import { printJson, UsageError } from "../output.ts";
import { type GlobalOpts, run } from "./command-runner.ts";

/** The console page to open, when this machine has a desktop to open it on. */
function openBrowser(url: string): boolean {
  const desktop =
    process.platform === "darwin" || Boolean(process.env.DISPLAY || process.env.WAYLAND_DISPLAY);
  if (!desktop || !process.stderr.isTTY) return false;
  const opener = process.platform === "darwin" ? "open" : "xdg-open";
  try {
    const child = spawn(opener, [url], { stdio: "ignore", detached: true });
    child.on("error", () => {});
    child.unref();
    return true;
  } catch {
    return false;
  }
}

/** What this machine is called in the key list: user@host. */
function machineName(): string {
  let user = "denv";
  try {
    user = userInfo().username;
  } catch {}
  return `${user}@${hostname()}`.slice(0, 64);
}

/** Asks for a device code, shows it, and polls until a person answers or it expires. */
async function deviceLogin(
  server: string,
  options: { browser: boolean; clientName: string },
): Promise<{ apiKey: string; teamId: string; role: string }> {
  const anonymous = new DenvClient({ baseUrl: server, apiKey: "" });
  const code = await anonymous.device.start({ client_name: options.clientName });
  const opened = options.browser && openBrowser(code.verification_uri_complete);
  process.stderr.write(
    `To sign in, open ${code.verification_uri_complete}\n` +
      `and confirm the code ${code.user_code} (it expires in ${Math.round(code.expires_in / 60)} minutes).\n` +
      (opened ? "A browser window was opened for it.\n" : "") +
      "Waiting for the approval…\n",
  );
  let intervalMs = code.interval * 1000;
  const deadline = Date.now() + code.expires_in * 1000;
  while (Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, intervalMs));
    const r = await anonymous.device.poll({ device_code: code.device_code });
    if (r.status === "approved") return { apiKey: r.api_key, teamId: r.team_id, role: r.role };
    if (r.status === "slow_down") intervalMs += 1000;
    else if (r.status === "denied") throw new DenvError("forbidden", "the login was denied in the console");
    else if (r.status === "expired") break;
  }
  throw new DenvError("timeout", "the code expired before it was approved: run `denv login` again");
}

export function registerLoginCommands(program: Command): void {
  const login = program
    .command("login")
    .argument("[server]", "the denv server's URL (default: --server, DENV_SERVER, then the saved one)")
    .description(
      "Sign this CLI in: approve it in the browser (a new API key for your team), or save a given --api-key",
    )
    .option("--no-browser", "do not open a browser; print the URL and code only")
    .option("--name <name>", "what the new key is called (default: user@host)")
    .option("--json", "print JSON");
  login.action(
    run(login, async (_c, json, serverArg: string | undefined) => {
      const o = login.optsWithGlobals() as GlobalOpts & { browser: boolean; name?: string };
      const server = (serverArg ?? o.server ?? process.env.DENV_SERVER ?? readConfig().server)?.replace(
        /\/+$/,
        "",
      );
      if (!server) throw new UsageError("give the server's URL: denv login URL (`denv up` prints it)");
      if (!/^https?:\/\//.test(server)) throw new UsageError(`${server} is not an http(s):// URL`);
      const given = o.apiKey ?? process.env.DENV_API_KEY;
      let apiKey: string;
      let how: string;
      if (given) {
        apiKey = given;
        how = "with the given key";
      } else {
        const got = await deviceLogin(server, { browser: o.browser, clientName: o.name ?? machineName() });
        apiKey = got.apiKey;
        how = `with a new key (team ${got.teamId}, ${got.role})`;
      }
      // The key is checked before it is saved: a typo is never written down.
      const hosts = await new DenvClient({ baseUrl: server, apiKey }).hosts.list();
      const path = writeConfig({ server, api_key: apiKey });
      if (json) printJson({ ok: true, server, config: path, hosts: hosts.hosts.length, device: !given });
      else
        process.stdout.write(
          `logged in to ${server} ${how} (${hosts.hosts.length} host(s)); saved to ${path}\n`,
        );
      return 0;
    }),
  );
  login.addHelpText(
    "after",
    "\nExamples:\n  denv login http://127.0.0.1:7070\n  denv login --server http://127.0.0.1:7070 --api-key dk_...",
  );

  const logout = program
    .command("logout")
    .description("Revoke the saved API key on the server and forget it here")
    .option("--json", "print JSON");
  logout.action(
    run(logout, async (_c, json) => {
      const saved = readConfig();
      if (!saved.api_key || !saved.server) throw new UsageError("not logged in: there is no saved key");
      let revoked = true;
      try {
        await new DenvClient({ baseUrl: saved.server, apiKey: saved.api_key }).keys.revoke("current");
      } catch (err) {
        // A key the server no longer knows is as good as revoked; anything else is worth saying.
        if (!(err instanceof Error && "code" in err && err.code === "unauthenticated")) throw err;
        revoked = false;
      }
      writeConfig({ server: saved.server, api_key: "" });
      if (json) printJson({ ok: true, server: saved.server, revoked });
      else
        process.stdout.write(
          revoked
            ? `logged out of ${saved.server}: the key was revoked and forgotten\n`
            : `logged out of ${saved.server}: the server no longer knew the key; it was forgotten\n`,
        );
      return 0;
    }),
  );
}
