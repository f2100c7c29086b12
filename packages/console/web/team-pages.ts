import type { PostV1InvitationsBody } from "@denv/sdk/schema";
/** The team's hosts (capacity, last contact), API keys (revocable) and members (invitations). */
import { api, type Session } from "./console-api.ts";
import { age, badge, bytes, confirmDialog, errorBox, h, show } from "./dom.ts";

type Capacity = { cpus?: number; free_bytes?: number; total_bytes?: number; memory_bytes?: number };

export async function hostsPage(main: HTMLElement): Promise<void> {
  const { hosts } = await api.hosts.list();
  show(
    main,
    h("h1", {}, "Hosts"),
    hosts.length
      ? h(
          "table",
          {},
          h(
            "thead",
            {},
            h(
              "tr",
              {},
              ["host", "state", "arch", "storage", "free", "cpus", "memory", "denvd", "last contact"].map(
                (x) => h("th", {}, x),
              ),
            ),
          ),
          h(
            "tbody",
            {},
            hosts.map((x) => {
              const c = (x.capacity ?? {}) as Capacity;
              return h(
                "tr",
                {},
                h("td", {}, x.name),
                h("td", {}, badge(x.connected ? "connected" : "disconnected")),
                h("td", {}, x.arch ?? "—"),
                h("td", {}, x.storage ?? "—"),
                h("td", {}, `${bytes(c.free_bytes)} of ${bytes(c.total_bytes)}`),
                h("td", {}, String(c.cpus ?? "—")),
                h("td", {}, bytes(c.memory_bytes)),
                h("td", {}, h("code", {}, x.version ?? "—")),
                h("td", {}, age(x.last_seen)),
              );
            }),
          ),
        )
      : h(
          "p",
          { class: "muted" },
          "No hosts yet: `denv host join-token`, then the installer line on a machine with Docker.",
        ),
  );
}

export async function keysPage(main: HTMLElement, rerender: () => void): Promise<void> {
  const { keys } = await api.keys.list();
  const status = h("div", { "aria-live": "polite" });
  show(
    main,
    h("h1", {}, "API keys"),
    h(
      "p",
      { class: "muted" },
      "`denv login` makes one per machine. Revoking a key signs that machine out at once.",
    ),
    h(
      "table",
      {},
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ["name", "starts with", "role", "person", "created", ""].map((x) => h("th", {}, x)),
        ),
      ),
      h(
        "tbody",
        {},
        keys.map((k) =>
          h(
            "tr",
            {},
            h("td", {}, k.name),
            h("td", {}, h("code", {}, `${k.prefix}…`)),
            h("td", {}, k.role),
            h("td", {}, k.user_email ?? h("span", { class: "muted" }, "team key")),
            h("td", {}, age(k.created_at)),
            h(
              "td",
              {},
              h(
                "button",
                {
                  class: "danger small",
                  "aria-label": `revoke ${k.name}`,
                  onclick: async () => {
                    if (
                      !(await confirmDialog(
                        `Revoke ${k.name}?`,
                        "Whatever uses it is refused from now on.",
                        "Revoke",
                      ))
                    )
                      return;
                    try {
                      await api.keys.revoke(k.id);
                      rerender();
                    } catch (err) {
                      show(status, errorBox(err));
                    }
                  },
                },
                "Revoke",
              ),
            ),
          ),
        ),
      ),
    ),
    status,
  );
}

export async function membersPage(main: HTMLElement, session: Session, rerender: () => void): Promise<void> {
  const [{ members }, invitations] = await Promise.all([
    api.members.list(),
    session.role === "admin" ? api.invitations.list() : Promise.resolve({ invitations: [] }),
  ]);
  const status = h("div", { "aria-live": "polite" });
  const email = h("input", {
    id: "f-invite",
    name: "email",
    type: "email",
    required: true,
    autocomplete: "off",
  });
  const role = h(
    "select",
    { id: "f-role", name: "role" },
    ["member", "read-only", "admin"].map((r) => h("option", { value: r }, r)),
  );
  const invite = h(
    "form",
    { class: "card" },
    h("h2", {}, "Invite someone"),
    h(
      "div",
      { class: "actions" },
      h("label", { for: "f-invite" }, "email"),
      email,
      h("label", { for: "f-role" }, "role"),
      role,
      h("button", { type: "submit" }, "Invite"),
    ),
    status,
  );
  invite.addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const r = await api.invitations.create({
        email: email.value,
        // The select offers the roles the route takes, and the server checks what comes.
        role: role.value as PostV1InvitationsBody["role"],
      });
      show(
        status,
        h("p", { class: "ok" }, "Send them this link (shown once): ", h("code", { class: "select" }, r.url)),
      );
    } catch (err) {
      show(status, errorBox(err));
    }
  });
  show(
    main,
    h("h1", {}, `Members of ${session.team.name}`),
    h(
      "table",
      {},
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ["email", "role", "since"].map((x) => h("th", {}, x)),
        ),
      ),
      h(
        "tbody",
        {},
        members.map((m) => h("tr", {}, h("td", {}, m.email), h("td", {}, m.role), h("td", {}, age(m.since)))),
      ),
    ),
    session.role === "admin" ? invite : null,
    invitations.invitations.length
      ? h(
          "section",
          {},
          h("h2", {}, "Invitations"),
          h(
            "ul",
            {},
            invitations.invitations.map((i) =>
              h(
                "li",
                {},
                `${i.email || "a sign-in link"} as ${i.role} · `,
                i.accepted_at ? "accepted " : "expires ",
                age(i.accepted_at ?? i.expires_at),
              ),
            ),
          ),
        )
      : null,
  );
  void rerender;
}
