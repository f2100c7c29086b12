/**
 * docs/cli.md, generated from the command tree itself (every command's usage, description,
 * options and examples), so the page cannot drift from what `denv --help` says. Run
 * `node packages/cli/src/cli-docs.ts` to write it; cli-docs.test.ts checks it is current.
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Command, Help } from "commander";
import { buildProgram } from "./program.ts";

function section(cmd: Command, help: Help, path: string[], out: string[]): void {
  const name = [...path, cmd.name()].join(" ");
  const subs = cmd.commands.filter((c) => c.name() !== "help");
  out.push(`${"#".repeat(Math.min(path.length + 1, 4))} \`${name}\``, "");
  if (cmd.description()) out.push(cmd.description(), "");
  if (!subs.length || cmd.options.length) {
    out.push("```", help.commandUsage(cmd));
    const opts = help.visibleOptions(cmd).filter((o) => o.long !== "--help");
    for (const o of opts) out.push(`  ${help.optionTerm(o).padEnd(32)} ${help.optionDescription(o)}`);
    out.push("```", "");
  }
  // Examples and notes a command adds after its help (addHelpText "after" listens for this).
  const extra: string[] = [];
  (cmd as unknown as NodeJS.EventEmitter).emit("afterHelp", {
    error: false,
    command: cmd,
    write: (t: string) => extra.push(t),
  });
  const text = extra.join("").trim();
  if (text) out.push("```", text, "```", "");
  for (const sub of subs) section(sub, help, [...path, cmd.name()], out);
}

export function renderCliDocs(): string {
  const program = buildProgram();
  const help = program.createHelp();
  const out = [
    "# The `denv` command",
    "",
    "Generated from the command tree (`node packages/cli/src/cli-docs.ts`); `denv COMMAND --help` says",
    "the same. Every command takes `--server` and `--api-key` (default: `DENV_SERVER` and",
    "`DENV_API_KEY`, then what `denv login` saved). Exit codes: 0 success; 1 the operation failed or",
    "the input was refused (the message says why); 2 a usage error.",
    "",
  ];
  for (const cmd of program.commands.filter((c) => c.name() !== "help")) section(cmd, help, ["denv"], out);
  return `${out
    .join("\n")
    .replace(/\n{3,}/g, "\n\n")
    .trimEnd()}\n`;
}

if (import.meta.main) {
  const file = join(import.meta.dirname, "..", "..", "..", "docs", "cli.md");
  writeFileSync(file, renderCliDocs());
  process.stdout.write(`wrote ${file}\n`);
}
