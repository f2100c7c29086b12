/** Exec: a command in an environment's service, its output streamed, its exit code passed through. */
import type { Command } from "commander";
import { printJson } from "../output.ts";
import { run } from "./command-runner.ts";

export function registerExecCommands(program: Command): void {
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
        const piped = !process.stdin.isTTY && !process.env.DENV_NO_STDIN;
        // Piped stdin streams to the command as it is read (any size), its output back as it comes.
        if (piped && !json) {
          const request = {
            command,
            ...(o.service ? { service: o.service } : {}),
            ...(o.user ? { user: o.user } : {}),
            ...(o.cwd ? { cwd: o.cwd } : {}),
            ...(o.timeout ? { timeout_ms: Number(o.timeout) } : {}),
          };
          const r = await client().execWithStdin(env, request, process.stdin, (which, data) => {
            const out = which === "stdout" ? process.stdout : process.stderr;
            if (!out.write(data)) return new Promise<void>((resolve) => out.once("drain", () => resolve()));
          });
          if (r.timed_out)
            process.stderr.write(`denv: the command timed out after ${o.timeout} ms and was killed\n`);
          return r.exit_code;
        }
        const stdin = piped ? await readStdinIfPiped() : undefined;
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
          const r = await client().exec(env, body);
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
}

async function readStdinIfPiped(): Promise<Buffer | undefined> {
  if (process.stdin.isTTY) return undefined;
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}
