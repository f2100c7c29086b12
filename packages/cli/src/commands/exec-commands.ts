/** Exec: a command in an environment's service, its output streamed, its exit code passed through. */
import type { DenvClient } from "@denv/sdk";
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
    .option("-i, --interactive", "send this terminal's input to the command as you type it")
    .option("-t, --tty", "run the command on a terminal of this one's size (its output all on stdout)")
    .option("--json", "print JSON (exit code, stdout, stderr)")
    .addHelpText(
      "after",
      '\nExamples:\n  denv exec --service opsbox rollout-017 -- psql -c "select count(*) from orders"\n  denv exec -it rollout-017 -- bash      a shell, as docker exec -it',
    );
  exec.action(
    run(exec, async (client, json, env: string, command: string[], o: ExecFlags) => {
      if (o.interactive || o.tty) return interactive(client(), env, command, o);
      const piped = !process.stdin.isTTY && !process.env.DENV_NO_STDIN;
      // Piped stdin streams to the command as it is read (any size), its output back as it comes.
      if (piped && !json) {
        const r = await client().execWithStdin(env, requestOf(command, o), process.stdin, writeOut);
        if (r.timed_out)
          process.stderr.write(`denv: the command timed out after ${o.timeout} ms and was killed\n`);
        return r.exit_code;
      }
      const stdin = piped ? await readStdinIfPiped() : undefined;
      const body = {
        ...requestOf(command, o),
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
    }),
  );
}

/** The exec command's options. */
interface ExecFlags {
  service?: string;
  user?: string;
  cwd?: string;
  timeout?: string;
  interactive?: boolean;
  tty?: boolean;
}

/** The exec request the options make (what every form of exec sends). */
function requestOf(command: string[], o: ExecFlags) {
  return {
    command,
    ...(o.service ? { service: o.service } : {}),
    ...(o.user ? { user: o.user } : {}),
    ...(o.cwd ? { cwd: o.cwd } : {}),
    ...(o.timeout ? { timeout_ms: Number(o.timeout) } : {}),
  };
}

/** Output to this terminal as it comes; a full pipe holds the command back until it drains. */
function writeOut(which: "stdout" | "stderr", data: Buffer): Promise<void> | undefined {
  const out = which === "stdout" ? process.stdout : process.stderr;
  if (!out.write(data)) return new Promise<void>((resolve) => out.once("drain", () => resolve()));
  return undefined;
}

/**
 * `exec -i` / `-t` / `-it`, as docker exec: with -t the command runs on a terminal of this one's
 * size (what it writes comes back as it is, escapes included); with -i what is typed goes to it as
 * it is typed (this terminal in raw mode, so ^C and ^D are the command's terminal's to act on).
 */
async function interactive(
  client: DenvClient,
  env: string,
  command: string[],
  o: ExecFlags,
): Promise<number> {
  const request = {
    ...requestOf(command, o),
    ...(o.tty ? { tty: { rows: process.stdout.rows || 24, cols: process.stdout.columns || 80 } } : {}),
  };
  const raw = o.interactive && o.tty && process.stdin.isTTY;
  if (raw) process.stdin.setRawMode(true);
  // Without -i the command's stdin is empty, as docker exec's.
  const input: AsyncIterable<Uint8Array> = o.interactive ? process.stdin : (async function* () {})();
  try {
    const r = await client.execWithStdin(env, request, input, writeOut);
    if (r.timed_out)
      process.stderr.write(`\r\ndenv: the command timed out after ${o.timeout} ms and was killed\n`);
    return r.exit_code;
  } finally {
    if (raw) process.stdin.setRawMode(false);
    // The command ended: what is still being typed is not read on (nor waited for).
    process.stdin.destroy();
  }
}

async function readStdinIfPiped(): Promise<Buffer | undefined> {
  if (process.stdin.isTTY) return undefined;
  const chunks: Buffer[] = [];
  for await (const c of process.stdin) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}
