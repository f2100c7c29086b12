import type { PostV1AuthSignupBody } from "@denv/sdk/schema";
/** Signing in and up (also through an invitation), and approving a CLI's device login. */
import { ApiError, api, type Session, setCsrf } from "./console-api.ts";
import { errorBox, h, show } from "./dom.ts";

type Go = (hash: string) => void;

function field(label: string, name: string, type: string, extra: Record<string, string | boolean> = {}) {
  const id = `f-${name}`;
  return h(
    "div",
    { class: "field" },
    h("label", { for: id }, label),
    h("input", { id, name, type, required: true, ...extra }),
  );
}

/** Sign in, or (with `signup`) make an account; `invitation` joins the team that sent it. */
export function signInPage(
  main: HTMLElement,
  go: Go,
  options: { signup: boolean; invitation?: string; next?: string },
): void {
  const { signup, invitation } = options;
  const status = h("div", { "aria-live": "polite" });
  const form = h(
    "form",
    { class: "card narrow", novalidate: false },
    h("h1", {}, invitation ? "Join your team" : signup ? "Create an account" : "Sign in to denv"),
    field("Email", "email", "email", { autocomplete: "email", autofocus: true }),
    field("Password", "password", "password", {
      autocomplete: signup ? "new-password" : "current-password",
      minlength: signup ? "10" : "1",
    }),
    signup && !invitation
      ? h(
          "div",
          { class: "field" },
          h("label", { for: "f-team" }, "Team name ", h("span", { class: "muted" }, "(optional)")),
          h("input", { id: "f-team", name: "team", type: "text", maxlength: "100" }),
        )
      : null,
    h("button", { type: "submit" }, signup ? "Create account" : "Sign in"),
    status,
    invitation
      ? null
      : h(
          "p",
          { class: "muted" },
          signup ? "Have an account? " : "New here? ",
          h("a", { href: signup ? "#/login" : "#/signup" }, signup ? "Sign in" : "Create an account"),
        ),
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const data = new FormData(form);
    const body: PostV1AuthSignupBody = {
      email: String(data.get("email") ?? ""),
      password: String(data.get("password") ?? ""),
    };
    if (signup && data.get("team")) body.team_name = String(data.get("team"));
    if (invitation) body.invitation = invitation;
    show(status, h("p", { class: "muted" }, "…"));
    try {
      const s = signup ? await api.auth.signup(body) : await api.auth.login(body);
      setCsrf(s.csrf_token);
      go(options.next ?? "#/");
    } catch (err) {
      show(status, errorBox(err));
    }
  });
  show(main, form);
}

/** A CLI waiting in `denv login`: who asked, and the person's answer. */
export async function devicePage(main: HTMLElement, session: Session, code: string): Promise<void> {
  const input = h("input", {
    id: "f-code",
    name: "code",
    value: code,
    autocomplete: "off",
    spellcheck: "false",
    required: true,
    pattern: "[A-Za-z]{4}-?[A-Za-z]{4}",
  });
  const result = h("div", { "aria-live": "polite" });
  const lookup = h("form", { class: "card narrow" });
  show(
    lookup,
    h("h1", {}, "Approve a device login"),
    h(
      "p",
      {},
      "The code ",
      h("code", {}, "denv login"),
      " printed. Approving gives that machine an API key of ",
      h("strong", {}, session.team.name),
      ` with your role (${session.role}).`,
    ),
    h("div", { class: "field" }, h("label", { for: "f-code" }, "Code"), input),
    h("button", { type: "submit" }, "Look it up"),
    result,
  );
  const answer = async (userCode: string, approve: boolean) => {
    try {
      await api.device.answer(userCode, { approve });
      show(
        result,
        h(
          "p",
          { class: approve ? "ok" : "muted", role: "status" },
          approve
            ? "Approved: the CLI is signed in. You can close this page."
            : "Denied: the CLI was refused.",
        ),
      );
    } catch (err) {
      show(result, errorBox(err));
    }
  };
  const find = async () => {
    try {
      const d = await api.device.get(input.value.trim());
      show(
        result,
        h(
          "div",
          { class: "device" },
          h(
            "p",
            {},
            "Asked by ",
            h("strong", {}, d.client_name),
            " with code ",
            h("code", {}, d.user_code),
            ".",
          ),
          h(
            "div",
            { class: "actions" },
            h(
              "button",
              { type: "button", id: "approve", onclick: () => answer(d.user_code, true) },
              "Approve",
            ),
            h(
              "button",
              { type: "button", class: "secondary", id: "deny", onclick: () => answer(d.user_code, false) },
              "Deny",
            ),
          ),
        ),
      );
    } catch (err) {
      show(result, err instanceof ApiError && err.status === 404 ? errorBox(err.message) : errorBox(err));
    }
  };
  lookup.addEventListener("submit", (e) => {
    e.preventDefault();
    void find();
  });
  show(main, lookup);
  if (code) await find();
}
