/**
 * A task's oracle (Harbor's solution/solve.sh): the known-good answer, run in an environment as
 * the agent would run it, so the verifier can be checked against it. The solution directory is
 * copied to /solution (links refused: it may come from someone else's repository), then
 * `bash /solution/solve.sh` runs as the service's own user, with Harbor's oracle environment.
 */
import type { DenvClient } from "@denv/sdk";
import { tarOf } from "../commands/file-commands.ts";

export interface OracleRun {
  exit_code: number;
  stdout_tail: string;
  stderr_tail: string;
}

export async function runOracle(
  client: DenvClient,
  env: string,
  solutionDir: string,
  options: { service: string; env?: Record<string, string>; timeoutMs?: number },
): Promise<OracleRun> {
  await client.putTar(
    env,
    { path: "/", service: options.service, user: "root" },
    tarOf(solutionDir, "solution", 0, 0, { refuseLinks: true }),
  );
  const r = await client.exec(env, {
    service: options.service,
    command: ["bash", "-c", "chmod -R a+rX /solution 2>/dev/null; bash /solution/solve.sh"],
    env: { DEBIAN_FRONTEND: "noninteractive", ...(options.env ?? {}) },
    timeout_ms: options.timeoutMs ?? 30 * 60_000,
  });
  return {
    exit_code: r.exit_code,
    stdout_tail: r.stdout.slice(-2000),
    stderr_tail: r.stderr.slice(-2000),
  };
}
