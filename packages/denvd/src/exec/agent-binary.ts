import { existsSync } from "node:fs";

/** Where the set-up builds denv-agent (scripts/setup-host.sh). */
export const DEFAULT_AGENT_BINARY = "/var/lib/denv-host/agent/denv-agent";

/** The denv-agent to use: DENVD_AGENT, else the set-up's build; null when there is none (exec then uses the engine). */
export function defaultAgentBinary(): string | null {
  const path = process.env.DENVD_AGENT ?? DEFAULT_AGENT_BINARY;
  return existsSync(path) ? path : null;
}
