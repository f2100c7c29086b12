/**
 * Projects: the list, a new project from a repository one of the team's GitHub App installations
 * gives (pick a kind, pick the repository, deploy), and a project's page with its environments and
 * the branches and pull-request previews its webhooks made.
 */
import type { PostV1ProjectsBody } from "@denv/sdk/schema";
import { api } from "./console-api.ts";
import { age, badge, errorBox, h, show } from "./dom.ts";

type Go = (hash: string) => void;

const KINDS = ["rl-environment", "agent", "service", "website", "inference"] as const;

export async function projectsPage(main: HTMLElement, go: Go): Promise<void> {
  const { projects } = await api.projects.list();
  show(
    main,
    h("h1", {}, "Projects"),
    h("p", {}, h("button", { id: "new-project", onclick: () => go("#/projects/new") }, "New project")),
    projects.length
      ? h(
          "table",
          {},
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              ["project", "kind", "source", "created"].map((x) => h("th", {}, x)),
            ),
          ),
          h(
            "tbody",
            {},
            projects.map((p) =>
              h(
                "tr",
                {},
                h("td", {}, h("a", { href: `#/project/${encodeURIComponent(p.name)}` }, p.name)),
                h("td", {}, p.kind),
                h("td", {}, h("code", {}, p.source)),
                h("td", {}, age(p.created_at)),
              ),
            ),
          ),
        )
      : h("p", { class: "muted" }, "No projects yet."),
  );
}

/** New project → pick a kind → pick a repository of an installation → deploy alpha. */
export async function newProjectPage(main: HTMLElement, go: Go): Promise<void> {
  const { installations } = await api.github.repositories();
  const repos = installations.flatMap((i) => i.repositories.map((r) => ({ ...r, account: i.account })));
  if (repos.length === 0) {
    show(
      main,
      h("h1", {}, "New project"),
      h(
        "p",
        { class: "muted" },
        "No repository to pick: connect the team's GitHub App (`denv github connect`) and install it on a repository.",
      ),
    );
    return;
  }
  const name = h("input", {
    id: "p-name",
    name: "name",
    required: true,
    size: 30,
    pattern: "[A-Za-z0-9][A-Za-z0-9_.-]*",
  });
  const kind = h(
    "select",
    { id: "p-kind", name: "kind" },
    KINDS.map((k) => h("option", { value: k }, k)),
  );
  const repo = h(
    "select",
    { id: "p-repo", name: "repository" },
    repos.map((r) => h("option", { value: r.full_name }, `${r.full_name} (${r.default_branch})`)),
  );
  // The name follows the repository until a person types one.
  let named = false;
  name.addEventListener("input", () => {
    named = true;
  });
  const follow = () => {
    if (!named) name.value = (repo.value.split("/")[1] ?? "").replace(/[^A-Za-z0-9_.-]/g, "-");
  };
  repo.addEventListener("change", follow);
  follow();
  const status = h("div", { role: "status" });
  const form = h(
    "form",
    { class: "card", id: "new-project-form", "aria-labelledby": "new-project-h" },
    h("h2", { id: "new-project-h" }, "From a GitHub repository"),
    h(
      "div",
      { class: "actions" },
      h("label", { for: "p-kind" }, "kind"),
      kind,
      h("label", { for: "p-repo" }, "repository"),
      repo,
      h("label", { for: "p-name" }, "name"),
      name,
      h("button", { type: "submit" }, "Create and deploy"),
    ),
    h(
      "p",
      { class: "muted" },
      "Alpha deploys from the default branch now; every push to it deploys again, and the check on the commit links here.",
    ),
    status,
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    show(status, h("p", { class: "muted" }, `creating ${name.value}…`));
    try {
      const p = await api.projects.create({
        name: name.value,
        // The select offers the kinds the route takes, and the server checks what comes.
        kind: kind.value as PostV1ProjectsBody["kind"],
        source: `github:${repo.value}`,
      });
      const d = await api.projects.deploy(p.name, { env: "alpha" });
      go(`#/deployment/${d.id}`);
    } catch (err) {
      show(status, errorBox(err));
    }
  });
  show(main, h("h1", {}, "New project"), form);
}

/** A project: its environments, and the branches and previews its pushes and pull requests made. */
export async function projectPage(main: HTMLElement, ref: string): Promise<void> {
  const p = await api.projects.get(ref);
  const [{ environments }, gh] = await Promise.all([
    api.envs.list(),
    p.source_type === "github" ? api.projects.github(p.id) : Promise.resolve({ environments: [] }),
  ]);
  const mine = environments.filter((e) => e.project === p.name && e.status !== "destroyed");
  const made = gh.environments.filter((e) => e.trigger !== "push");
  show(
    main,
    h("h1", {}, p.name),
    h(
      "p",
      { class: "muted" },
      `${p.kind} · `,
      h("code", {}, p.source),
      p.source_type === "github"
        ? ` · branches: ${p.branches ? p.branches.join(", ") : "as x-denv.branches says"}`
        : "",
    ),
    h("h2", {}, "Environments"),
    mine.length
      ? h(
          "ul",
          { id: "project-envs" },
          mine.map((e) => h("li", {}, h("a", { href: `#/env/${e.id}` }, e.name), " ", badge(e.status))),
        )
      : h("p", { class: "muted" }, "None running."),
    p.source_type === "github" ? h("h2", {}, "Branches and previews") : null,
    p.source_type === "github"
      ? made.length
        ? h(
            "table",
            { id: "branches-previews" },
            h(
              "thead",
              {},
              h(
                "tr",
                {},
                ["environment", "from", "commit", "by", "status", "deployment"].map((x) => h("th", {}, x)),
              ),
            ),
            h(
              "tbody",
              {},
              made.map((e) => {
                const env = mine.find((x) => x.name === e.environment);
                return h(
                  "tr",
                  {},
                  h("td", {}, env ? h("a", { href: `#/env/${env.id}` }, e.environment) : e.environment),
                  h(
                    "td",
                    {},
                    e.trigger === "preview" ? `pull request #${e.pull_request}` : `branch ${e.ref}`,
                  ),
                  h("td", {}, h("code", {}, e.commit.slice(0, 12))),
                  h("td", {}, e.pushed_by ?? "—"),
                  h("td", {}, badge(e.status)),
                  h("td", {}, h("a", { href: `#/deployment/${e.deployment_id}` }, e.deployment_status)),
                );
              }),
            ),
          )
        : h(
            "p",
            { class: "muted" },
            "None yet: a pull request into the default branch gets a preview, and branches the project opted in get environments of their own.",
          )
      : null,
  );
}
