/**
 * The team's people from the command line: who is in it and with which role, invitations (the
 * link is shown once), a role changed, someone removed. What the console's Members page does, for a
 * team made by `denv up` whose only way in so far is its admin key.
 */
import { spawn } from "node:child_process";
import type { Command } from "commander";
import { ageOf, printJson, printTable, UsageError } from "../output.ts";
import { run } from "./command-runner.ts";

const ROLES = ["admin", "member", "read-only"] as const;
type Role = (typeof ROLES)[number];

function roleOf(text: string): Role {
  if (!(ROLES as readonly string[]).includes(text))
    throw new UsageError(`--role ${text}: one of ${ROLES.join(", ")}`);
  return text as Role;
}

export function registerMemberCommands(program: Command): void {
  const member = program.command("member").description("People of your team: members and invitations");
  const list = member
    .command("list")
    .description("The team's members and their roles, and invitations not yet accepted")
    .option("--json", "print JSON");
  list.action(
    run(list, async (client, json) => {
      const [m, inv] = await Promise.all([client().members.list(), client().invitations.list()]);
      const pending = inv.invitations.filter((i) => !i.accepted_at);
      if (json) printJson({ members: m.members, invitations: pending });
      else {
        if (m.members.length)
          printTable(
            ["EMAIL", "ROLE", "SINCE", "ID"],
            m.members.map((x) => [x.email, x.role, ageOf(x.since), x.user_id]),
          );
        else process.stdout.write("no members yet: people join by invitation (denv member invite EMAIL)\n");
        if (pending.length) {
          process.stdout.write("\ninvited, not yet joined:\n");
          printTable(
            ["EMAIL", "ROLE", "EXPIRES", "ID"],
            pending.map((i) => [i.email || "(a sign-in link)", i.role, i.expires_at, i.id]),
          );
        }
      }
      return 0;
    }),
  );
  const invite = member
    .command("invite")
    .description(
      "Invite someone by email (the link to join, shown once, is theirs to open in the console), or, with no email, make a one-time sign-in link anyone may open (a day)",
    )
    .argument("[email]")
    .option("--role <role>", `their role: ${ROLES.join(", ")}`, "member")
    .option("--json", "print JSON")
    .addHelpText(
      "after",
      "\nExamples:\n  denv member invite ana@example.com --role admin\n  denv member invite --role admin      a one-time link",
    );
  invite.action(
    run(invite, async (client, json, email: string | undefined, o: { role: string }) => {
      const r = await client().invitations.create({ ...(email ? { email } : {}), role: roleOf(o.role) });
      if (json) printJson(r);
      else if (email)
        process.stdout.write(
          `invited ${r.email} as ${r.role} (until ${r.expires_at}); send them this link, shown once:\n${r.url}\n`,
        );
      else
        process.stdout.write(
          `a one-time sign-in link as ${r.role} (until ${r.expires_at}; whoever opens it first joins), shown once:\n${r.url}\n`,
        );
      return 0;
    }),
  );
  /** A member by email or user id. */
  const memberId = async (client: Parameters<Parameters<typeof run>[1]>[0], who: string) => {
    const { members } = await client().members.list();
    const m = members.find((x) => x.user_id === who || x.email === who.toLowerCase());
    if (!m) throw new UsageError(`no member ${who} in your team (\`denv member list\` shows who is)`);
    return m;
  };
  const role = member
    .command("role")
    .description("Change a member's role")
    .argument("<member>", "their email or user id")
    .argument("<role>", ROLES.join(" | "))
    .option("--json", "print JSON");
  role.action(
    run(role, async (client, json, who: string, to: string) => {
      const m = await memberId(client, who);
      const r = await client().members.setRole(m.user_id, { role: roleOf(to) });
      if (json) printJson(r);
      else process.stdout.write(`${r.email} is ${r.role}\n`);
      return 0;
    }),
  );
  const remove = member
    .command("remove")
    .description("Remove someone from the team: their keys and sessions for it end")
    .argument("<member>", "their email or user id")
    .option("--json", "print JSON");
  remove.action(
    run(remove, async (client, json, who: string) => {
      const m = await memberId(client, who);
      const r = await client().members.remove(m.user_id);
      if (json) printJson(r);
      else process.stdout.write(`removed ${m.email}\n`);
      return 0;
    }),
  );
  registerConsoleCommand(program);
}

/**
 * `denv console`: a one-time sign-in link to the team's console (a day to open it), opened in the
 * browser when this terminal is a person's (a TTY with a desktop opener), printed either way.
 */
function registerConsoleCommand(program: Command): void {
  const cmd = program
    .command("console")
    .description("A one-time sign-in link to your team's console, opened in a browser where one can be")
    .option("--role <role>", `the role of the account it makes: ${ROLES.join(", ")}`, "admin")
    .option("--no-open", "print the link only")
    .option("--json", "print JSON");
  cmd.action(
    run(cmd, async (client, json, o: { role: string; open: boolean }) => {
      const r = await client().invitations.create({ role: roleOf(o.role) });
      if (json) {
        printJson(r);
        return 0;
      }
      process.stdout.write(
        `${r.url}\n  (one-time, until ${r.expires_at}: whoever opens it first makes an account in your team)\n`,
      );
      if (o.open && process.stdout.isTTY) {
        const opener = process.platform === "darwin" ? "open" : "xdg-open";
        // Best effort: a machine with no desktop has no opener, and the link is printed above.
        const child = spawn(opener, [r.url], { detached: true, stdio: "ignore" });
        child.on("error", () => {});
        child.unref();
      }
      return 0;
    }),
  );
}
