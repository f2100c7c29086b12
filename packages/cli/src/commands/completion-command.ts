/**
 * `denv completion bash|zsh|fish`: a completion script for the shell, made from the command tree
 * itself, so every command, subcommand and option completes as `--help` lists it. Load it with
 * `source <(denv completion bash)` (zsh: the same with `zsh`; fish: `denv completion fish | source`).
 */
import type { Command } from "commander";
import { UsageError } from "../output.ts";

/** Each command path ("" for denv itself, "env", "env list") with its subcommands and long options. */
export function commandTable(program: Command): Map<string, { subs: string[]; options: string[] }> {
  const table = new Map<string, { subs: string[]; options: string[] }>();
  const walk = (cmd: Command, path: string[]) => {
    const subs = cmd.commands.filter((c) => c.name() !== "help");
    table.set(path.join(" "), {
      subs: subs.map((c) => c.name()),
      options: [...cmd.options.map((o) => o.long).filter((l): l is string => !!l), "--help"],
    });
    for (const c of subs) walk(c, [...path, c.name()]);
  };
  walk(program, []);
  return table;
}

/** A word as the shell reads it: command names and flags are [a-z0-9-] only, so nothing to quote. */
const safe = (w: string) => {
  if (!/^[A-Za-z0-9-]+$/.test(w)) throw new Error(`cannot complete ${JSON.stringify(w)}`);
  return w;
};

export function bashCompletion(program: Command): string {
  const table = commandTable(program);
  const arms = (pick: (e: { subs: string[]; options: string[] }) => string[]) =>
    [...table]
      .map(
        ([path, e]) =>
          `    "${path ? path.split(" ").map(safe).join(" ") : ""}") echo "${pick(e).map(safe).join(" ")}" ;;`,
      )
      .join("\n");
  return `# denv completion for bash (and zsh through bashcompinit): source <(denv completion bash)
_denv_subcommands() {
  case "$1" in
${arms((e) => e.subs)}
  esac
}
_denv_options() {
  case "$1" in
${arms((e) => e.options)}
  esac
}
_denv() {
  local cur="\${COMP_WORDS[COMP_CWORD]}" path="" i w
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="\${COMP_WORDS[i]}"
    case " $(_denv_subcommands "$path") " in *" $w "*) path="\${path:+$path }$w" ;; esac
  done
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$(_denv_options "$path")" -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$(_denv_subcommands "$path")" -- "$cur"))
  fi
}
complete -o default -F _denv denv
`;
}

export function zshCompletion(program: Command): string {
  return `# denv completion for zsh: source <(denv completion zsh)
autoload -U +X bashcompinit && bashcompinit
${bashCompletion(program)}`;
}

export function fishCompletion(program: Command): string {
  const lines = ["# denv completion for fish: denv completion fish | source", "complete -c denv -f"];
  for (const [path, e] of commandTable(program)) {
    const words = path ? path.split(" ").map(safe) : [];
    // At the top: no subcommand yet; below: the path's last word seen, and none of its subcommands.
    const where = words.length
      ? `__fish_seen_subcommand_from ${words.at(-1)}${e.subs.length ? `; and not __fish_seen_subcommand_from ${e.subs.map(safe).join(" ")}` : ""}`
      : "__fish_use_subcommand";
    if (e.subs.length) lines.push(`complete -c denv -n '${where}' -a '${e.subs.map(safe).join(" ")}'`);
    for (const o of e.options) lines.push(`complete -c denv -n '${where}' -l ${safe(o.replace(/^--/, ""))}`);
  }
  return `${lines.join("\n")}\n`;
}

export function registerCompletionCommand(program: Command): void {
  program
    .command("completion")
    .description("A completion script for your shell: bash, zsh or fish")
    .argument("<shell>", "bash | zsh | fish")
    .addHelpText(
      "after",
      "\nExamples:\n  source <(denv completion bash)        # in ~/.bashrc\n  source <(denv completion zsh)         # in ~/.zshrc\n  denv completion fish | source         # in ~/.config/fish/config.fish",
    )
    .action((shell: string) => {
      const make = { bash: bashCompletion, zsh: zshCompletion, fish: fishCompletion }[shell];
      if (!make) throw new UsageError(`${shell}: the shells are bash, zsh and fish`);
      process.stdout.write(make(program));
    });
}
