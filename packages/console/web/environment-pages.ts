/**
 * Environments: the tree of versions and forks (which fork came from which version, with status,
 * age and host), a sandbox made on a target picked with that target's row shown beside it, and
 * one environment's page — its target and what that target can do, its
 * versions, its deployments, the actions (each confirmed; those its target cannot do are off) and
 * an exec terminal for its services.
 */
import { type Answer, api, execStream, logLines } from "./console-api.ts";
import { age, badge, confirmDialog, crumbs, errorBox, h, show } from "./dom.ts";

type Env = Answer<"getV1Envs">["environments"][number];
type Version = Answer<"getV1Versions">["versions"][number];
type Go = (hash: string) => void;
type TargetRow = Answer<"getV1Targets">["targets"][number];

/** The row's cells in the seed's words, in its order. */
const CELLS: [keyof TargetRow["capabilities"], string][] = [
  ["multi_service_stack", "Multi-service stack"],
  ["consistent_snapshot", "Consistent snapshot across volumes"],
  ["fork", "Fork"],
  ["fork_time", "Fork time"],
  ["egress_deny_verified", "Egress deny, verified"],
  ["caps_enforced", "Caps enforced"],
  ["gpu", "GPU"],
  ["verify", "Verify"],
];

/** A target's capability row: each cell in words, marked when a caller may rely on it. */
function targetCard(row: TargetRow | undefined, name: string): HTMLElement {
  if (!row)
    return h(
      "section",
      { class: "card", id: "target-row" },
      h("h2", {}, `Target ${name}`),
      h("p", {}, "not connected"),
    );
  return h(
    "section",
    { class: "card", id: "target-row", "aria-labelledby": "target-h" },
    h("h2", { id: "target-h" }, `What ${row.name} (${row.type}) can do`),
    row.note ? h("p", { class: "muted" }, row.note) : null,
    h(
      "table",
      {},
      h(
        "tbody",
        {},
        CELLS.map(([cell, label]) =>
          h(
            "tr",
            { "data-cell": cell },
            h("th", { scope: "row" }, label),
            h("td", {}, row.supported.includes(cell) ? "✓ " : "✗ ", row.capabilities[cell]),
          ),
        ),
      ),
    ),
  );
}

function versionLink(id: string | null): HTMLElement | string {
  return id ? h("a", { href: `#/version/${id}` }, h("code", {}, id)) : "—";
}

function envLink(e: Env): HTMLElement {
  return h("a", { href: `#/env/${e.id}` }, `${e.project}/${e.name}`);
}

function envLine(e: Env, hosts: Map<string, string>): HTMLElement {
  return h(
    "span",
    { class: "node" },
    envLink(e),
    " ",
    badge(e.status),
    e.sandbox ? h("span", { class: "tag" }, "sandbox") : null,
    h("span", { class: "muted" }, " on ", e.host_id ? (hosts.get(e.host_id) ?? e.host_id) : "—", " · "),
    age(e.created_at),
  );
}

/**
 * A sandbox from an image on a target the person picks, with the picked target's row shown as
 * they pick, so nobody is promised what that target cannot do before they create.
 */
function newSandboxForm(targets: TargetRow[], go: Go): HTMLElement {
  const picker = h(
    "select",
    { id: "f-target", name: "target" },
    targets.map((t) =>
      h(
        "option",
        { value: t.name, disabled: !t.available },
        `${t.name} (${t.type})${t.available ? "" : ", not available"}`,
      ),
    ),
  );
  picker.value = targets.find((t) => t.available)?.name ?? targets[0]?.name ?? "";
  const image = h("input", {
    id: "f-image",
    name: "image",
    required: true,
    placeholder: "python:3.12-slim",
    size: 40,
  });
  // What keeps it up: many images' own command exits at once without a terminal (python's does).
  const command = h("input", { id: "f-cmd", name: "cmd", value: "sleep infinity", size: 24 });
  const row = h("div", {});
  const status = h("div", { role: "status" });
  const showRow = () =>
    show(
      row,
      targetCard(
        targets.find((t) => t.name === picker.value),
        picker.value,
      ),
    );
  picker.addEventListener("change", showRow);
  showRow();
  const form = h(
    "form",
    { class: "card", id: "new-sandbox", "aria-labelledby": "new-sandbox-h" },
    h("h2", { id: "new-sandbox-h" }, "New sandbox"),
    h(
      "div",
      { class: "actions" },
      h("label", { for: "f-target" }, "target"),
      picker,
      h("label", { for: "f-image" }, "image"),
      image,
      h("label", { for: "f-cmd" }, "command"),
      command,
      h("button", { type: "submit" }, "Create"),
    ),
    row,
    status,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    show(status, h("p", { class: "muted" }, `creating on ${picker.value}…`));
    try {
      const made = await api.targets.createSandbox(picker.value, {
        image: image.value,
        ...(command.value.trim() ? { cmd: ["sh", "-c", command.value] } : {}),
      });
      go(`#/env/${made.id}`);
    } catch (err) {
      show(status, errorBox(err));
    }
  });
  return form;
}

/** The tree: each environment, its versions, and under each version the forks made from it. */
export async function environmentsPage(main: HTMLElement, go: Go): Promise<void> {
  const [{ environments }, { versions }, { hosts }, { targets }] = await Promise.all([
    api.envs.list(),
    api.versions.list(),
    api.hosts.list(),
    api.targets.list(),
  ]);
  const hostNames = new Map(hosts.map((x) => [x.id, x.name]));
  const live = environments.filter((e) => e.status !== "destroyed");
  const versionsOf = new Map<string, Version[]>();
  for (const v of versions)
    versionsOf.set(v.environment_id, [...(versionsOf.get(v.environment_id) ?? []), v]);
  const forksOf = new Map<string, Env[]>();
  for (const e of live)
    if (e.parent_version_id)
      forksOf.set(e.parent_version_id, [...(forksOf.get(e.parent_version_id) ?? []), e]);
  const known = new Set(versions.map((v) => v.id));
  // Roots: deployed environments, and forks whose version is gone (pruned, or its environment's).
  const roots = live.filter((e) => !e.parent_version_id || !known.has(e.parent_version_id));
  const seen = new Set<string>();
  const node = (e: Env, depth: number): HTMLElement => {
    seen.add(e.id);
    const vs = (versionsOf.get(e.id) ?? []).slice().sort((a, b) => (a.created_at < b.created_at ? -1 : 1));
    return h(
      "li",
      { role: "treeitem", "aria-expanded": vs.length ? "true" : undefined },
      envLine(e, hostNames),
      vs.length
        ? h(
            "ul",
            { role: "group" },
            vs.map((v) =>
              h(
                "li",
                { role: "treeitem" },
                h(
                  "span",
                  { class: "node version" },
                  h("a", { href: `#/version/${v.id}` }, h("code", {}, v.id)),
                  e.current_version_id === v.id ? h("span", { class: "tag" }, "current") : null,
                  h("span", { class: "muted" }, " · "),
                  age(v.created_at),
                ),
                depth < 12 && forksOf.get(v.id)?.length
                  ? h(
                      "ul",
                      { role: "group" },
                      (forksOf.get(v.id) ?? []).filter((f) => !seen.has(f.id)).map((f) => node(f, depth + 1)),
                    )
                  : null,
              ),
            ),
          )
        : null,
    );
  };
  show(
    main,
    h("h1", {}, "Environments"),
    live.length
      ? h(
          "ul",
          { role: "tree", class: "tree", "aria-label": "environments, their versions and forks" },
          roots.map((e) => node(e, 0)),
        )
      : h(
          "p",
          { class: "muted" },
          "No environments yet: `denv project create` and `denv deploy` make the first one, or a sandbox below.",
        ),
    newSandboxForm(targets, go),
  );
}

/** One environment: what it is, its versions and deployments, actions, and an exec terminal. */
export async function environmentPage(main: HTMLElement, id: string, go: Go): Promise<void> {
  const [env, { deployments }, { versions }, { targets }] = await Promise.all([
    api.envs.get(id),
    api.envs.deployments(id),
    api.versions.list(),
    api.targets.list(),
  ]);
  const target = targets.find((t) => t.name === env.target);
  /** Whether its target does this: nobody is offered what the target cannot do. */
  const can = (cell: keyof TargetRow["capabilities"]) => target?.supported.includes(cell) ?? false;
  const mine = versions.filter((v) => v.environment_id === env.id);
  const status = h("div", { "aria-live": "polite" });
  /** Runs an action after its confirmation, then shows the deployment it made. */
  const act = async (
    title: string,
    detail: string,
    verb: string,
    run: () => Promise<{ deployment_id?: string; id?: string } | unknown>,
  ) => {
    if (!(await confirmDialog(title, detail, verb))) return;
    show(status, h("p", { class: "muted" }, `${verb}…`));
    try {
      const r = (await run()) as { id?: string; deployment_id?: string; kind?: string } | null;
      if (r && typeof r === "object" && "phases" in r && r.id) go(`#/deployment/${r.id}`);
      else if (r?.deployment_id) go(`#/deployment/${r.deployment_id}`);
      // An environment answered (pause, resume): its page again, as it is now.
      else if (r && typeof r === "object" && r.id === env.id) go(`#/env/${env.id}`);
      else go("#/");
    } catch (err) {
      show(status, errorBox(err));
    }
  };
  const forkName = h("input", {
    id: "f-fork",
    name: "fork",
    placeholder: "name (optional)",
    maxlength: "63",
  });
  const rollbackTo = h(
    "select",
    { id: "f-rollback", name: "rollback" },
    mine.map((v) => h("option", { value: v.id }, `${v.id} (${v.created_at.slice(0, 19).replace("T", " ")})`)),
  );
  const running = env.status === "running";
  show(
    main,
    crumbs(`${env.project}/${env.name}`),
    h("h1", {}, `${env.project}/${env.name} `, badge(env.status)),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "id"),
      h("dd", {}, h("code", {}, env.id)),
      h("dt", {}, "target"),
      h("dd", { id: "env-target" }, env.target),
      h("dt", {}, "services"),
      h("dd", {}, env.services.join(", ") || "—"),
      h("dt", {}, "current version"),
      h("dd", {}, versionLink(env.current_version_id)),
      h("dt", {}, "forked from"),
      h("dd", {}, versionLink(env.parent_version_id)),
      h("dt", {}, "created"),
      h("dd", {}, age(env.created_at)),
    ),
    targetCard(target, env.target),
    h(
      "section",
      { class: "card", "aria-labelledby": "actions-h" },
      h("h2", { id: "actions-h" }, "Actions"),
      h(
        "div",
        { class: "actions" },
        h("label", { for: "f-fork", class: "sr-only" }, "fork name"),
        forkName,
        h(
          "button",
          {
            id: "act-fork",
            disabled: !running || !can("fork"),
            onclick: () =>
              act(
                "Fork this environment?",
                "A new environment from its current version, with its own copy of every volume.",
                "Fork",
                () => api.envs.fork(env.id, forkName.value ? { name: forkName.value } : {}),
              ),
          },
          "Fork",
        ),
        h(
          "button",
          {
            id: "act-snapshot",
            disabled: !running || !can("consistent_snapshot"),
            onclick: () =>
              act(
                "Snapshot this environment?",
                "Freezes it briefly and records every volume as a new version.",
                "Snapshot",
                () => api.envs.snapshot(env.id),
              ),
          },
          "Snapshot",
        ),
        h(
          "button",
          {
            id: "act-snapshot-live",
            class: "secondary",
            disabled: !running || !can("consistent_snapshot"),
            onclick: () =>
              act(
                "Snapshot with its processes?",
                "Also keeps every service's running processes (their memory), so its forks carry on where it was; a service whose processes cannot be kept stays disk-only, and the version says why.",
                "Snapshot with processes",
                () => api.envs.snapshot(env.id, { live: "best-effort" }),
              ),
          },
          "Snapshot with processes",
        ),
        h(
          "button",
          {
            id: "act-verify",
            disabled: !running || !can("verify"),
            onclick: () =>
              act(
                "Verify this environment?",
                "Stops the agent, collects what the verifier reads, and grades it.",
                "Verify",
                () => api.envs.verify(env.id, {}),
              ),
          },
          "Verify",
        ),
      ),
      mine.length
        ? h(
            "div",
            { class: "actions" },
            h("label", { for: "f-rollback" }, "Roll back to"),
            rollbackTo,
            h(
              "button",
              {
                id: "act-rollback",
                class: "secondary",
                disabled: !running || !can("fork"),
                onclick: () =>
                  act(
                    "Roll back?",
                    `Every volume returns to ${rollbackTo.value}; what changed since is lost.`,
                    "Roll back",
                    () => api.envs.rollback(env.id, { version: rollbackTo.value }),
                  ),
              },
              "Roll back",
            ),
          )
        : null,
      h(
        "div",
        { class: "actions" },
        env.status === "paused"
          ? h(
              "button",
              {
                id: "act-resume",
                onclick: () =>
                  act(
                    "Resume this environment?",
                    "Every service's processes carry on from the memory its pause kept.",
                    "Resume",
                    () => api.envs.resume(env.id),
                  ),
              },
              "Resume",
            )
          : h(
              "button",
              {
                id: "act-pause",
                class: "secondary",
                disabled: !running || env.target !== "denvd",
                onclick: () =>
                  act(
                    "Pause this environment?",
                    "Every service's processes are written to disk with their memory and stopped; its containers and volumes stay, and resume carries on from there.",
                    "Pause",
                    () => api.envs.pause(env.id),
                  ),
              },
              "Pause",
            ),
        h(
          "button",
          {
            id: "act-destroy",
            class: "danger",
            disabled: env.status === "destroyed",
            onclick: () =>
              act(
                `Destroy ${env.project}/${env.name}?`,
                "Its containers, network and volumes are removed. Its versions stay.",
                "Destroy",
                () => api.envs.destroy(env.id),
              ),
          },
          "Destroy",
        ),
      ),
      status,
    ),
    running ? terminal(env) : null,
    running ? logsCard(env) : null,
    h("h2", {}, "Deployments"),
    h(
      "table",
      {},
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          h("th", {}, "deployment"),
          h("th", {}, "kind"),
          h("th", {}, "status"),
          h("th", {}, "when"),
          h("th", {}, "why"),
        ),
      ),
      h(
        "tbody",
        {},
        deployments.map((d) =>
          h(
            "tr",
            {},
            h("td", {}, h("a", { href: `#/deployment/${d.id}` }, d.id)),
            h("td", {}, d.kind),
            h("td", {}, badge(d.status)),
            h("td", {}, age(d.created_at)),
            h("td", { class: "reason" }, d.reason ?? ""),
          ),
        ),
      ),
    ),
  );
}

/** What the services wrote: the last lines of one service or all, read when asked (as text, never markup). */
function logsCard(env: Answer<"getV1EnvsById">): HTMLElement {
  // Its own class and name: the terminal's are the exec pane's alone.
  const out = h("pre", { class: "log-view", id: "logs-out", tabindex: "0", "aria-label": "lines written" });
  const service = h(
    "select",
    { id: "f-logs-service", name: "logs-service" },
    h("option", { value: "" }, "every service"),
    env.services.map((s) => h("option", { value: s }, s)),
  );
  const form = h(
    "form",
    { class: "card", "aria-labelledby": "logs-h" },
    h("h2", { id: "logs-h" }, "Logs"),
    h(
      "div",
      { class: "actions" },
      h("label", { for: "f-logs-service" }, "logs of"),
      service,
      h("button", { type: "submit", id: "show-logs" }, "Show the last 200 lines"),
    ),
    out,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    out.replaceChildren();
    try {
      const lines = await logLines(env.id, { service: service.value || undefined, tail: 200 });
      if (!lines.length) out.append(h("span", { class: "muted" }, "nothing written yet\n"));
      for (const l of lines)
        out.append(
          h("span", { class: "muted" }, `${l.service} | `),
          l.stream === "stderr" ? h("span", { class: "stderr" }, `${l.line}\n`) : `${l.line}\n`,
        );
    } catch (err) {
      out.append(h("span", { class: "stderr" }, `${err instanceof Error ? err.message : String(err)}\n`));
    }
    out.scrollTop = out.scrollHeight;
  });
  return form;
}

/** A command line into one of the environment's services, its output shown as it is written. */
function terminal(env: Answer<"getV1EnvsById">): HTMLElement {
  const out = h("pre", {
    class: "terminal",
    "aria-live": "polite",
    tabindex: "0",
    "aria-label": "terminal output",
  });
  const service = h(
    "select",
    { id: "f-service", name: "service" },
    env.services.map((s) => h("option", { value: s }, s)),
  );
  const command = h("input", {
    id: "f-command",
    name: "command",
    autocomplete: "off",
    spellcheck: "false",
    placeholder: "a shell command, e.g. ls -la",
    required: true,
  });
  const form = h(
    "form",
    { class: "card", "aria-labelledby": "term-h" },
    h("h2", { id: "term-h" }, "Terminal"),
    h(
      "div",
      { class: "actions" },
      h("label", { for: "f-service" }, "service"),
      service,
      h("label", { for: "f-command", class: "sr-only" }, "command"),
      command,
      h("button", { type: "submit", id: "run" }, "Run"),
    ),
    out,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const cmd = command.value;
    out.append(h("span", { class: "prompt" }, `${service.value}$ ${cmd}\n`));
    command.value = "";
    const run = form.querySelector("#run") as HTMLButtonElement;
    run.disabled = true;
    const follow = () => {
      out.scrollTop = out.scrollHeight;
    };
    try {
      await execStream(env.id, { service: service.value, command: cmd }, (ev) => {
        if (ev.kind === "stdout" || ev.kind === "stderr")
          out.append(ev.kind === "stdout" ? ev.text : h("span", { class: "stderr" }, ev.text));
        else if (ev.kind === "error") out.append(h("span", { class: "stderr" }, `${ev.message}\n`));
        else out.append(h("span", { class: "muted exit" }, `[exit ${ev.exitCode}]\n`));
        follow();
      });
    } catch (err) {
      out.append(h("span", { class: "stderr" }, `${err instanceof Error ? err.message : String(err)}\n`));
    }
    run.disabled = false;
    out.scrollTop = out.scrollHeight;
    command.focus();
  });
  return form;
}
