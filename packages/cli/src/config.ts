/**
 * Where the CLI finds its server and key: --server/--api-key flags, then DENV_SERVER/DENV_API_KEY
 * (as in the seed's examples), then the file `denv login` wrote (~/.config/denv/config.json).
 */
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { DenvError } from "@denv/protocol/errors";
import { DenvClient } from "@denv/sdk";

export interface CliConfig {
  server: string;
  api_key: string;
}

export function configPath(): string {
  return (
    process.env.DENV_CONFIG ??
    join(process.env.XDG_CONFIG_HOME ?? join(homedir(), ".config"), "denv", "config.json")
  );
}

export function readConfig(): Partial<CliConfig> {
  const p = configPath();
  return existsSync(p) ? (JSON.parse(readFileSync(p, "utf8")) as Partial<CliConfig>) : {};
}

export function writeConfig(config: CliConfig): string {
  const p = configPath();
  mkdirSync(dirname(p), { recursive: true });
  writeFileSync(p, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 });
  chmodSync(p, 0o600);
  return p;
}

export function clientFrom(opts: { server?: string; apiKey?: string }): DenvClient {
  const file = readConfig();
  const baseUrl = opts.server || process.env.DENV_SERVER || file.server;
  const apiKey = opts.apiKey || process.env.DENV_API_KEY || file.api_key;
  if (!baseUrl || !apiKey) {
    throw new DenvError(
      "unauthenticated",
      "no server or API key: run `denv login --server URL` (or `denv up` for a local one)",
    );
  }
  return new DenvClient({ baseUrl, apiKey });
}
