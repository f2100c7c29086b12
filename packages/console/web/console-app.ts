/**
 * The console: a client of /v1 in the browser. Routes live in the URL's hash (#/env/ID), so the
 * server serves one page; the session decides what may be seen, exactly as the API does for keys.
 */
import { devicePage, signInPage } from "./auth-pages.ts";
import { ApiError, api, currentSession, type Session, setCsrf } from "./console-api.ts";
import { deploymentPage } from "./deployment-page.ts";
import { errorBox, h, show } from "./dom.ts";
import { environmentPage, environmentsPage } from "./environment-pages.ts";
import { newProjectPage, projectPage, projectsPage } from "./project-pages.ts";
import { hostsPage, keysPage, membersPage } from "./team-pages.ts";
import { versionPage } from "./version-page.ts";

const main = document.getElementById("main") as HTMLElement;
const nav = document.getElementById("nav") as HTMLElement;
let stopLive: () => void = () => {};

function go(hash: string): void {
  if (location.hash === hash) void render();
  else location.hash = hash;
}

/** Dark or light: the system's choice unless the person picked one (kept in this browser). */
function applyTheme(): void {
  const picked = localStorage.getItem("denv-theme");
  if (picked) document.documentElement.dataset.theme = picked;
  else delete document.documentElement.dataset.theme;
}

function header(session: Session | null): void {
  const here = location.hash.split("?")[0] || "#/";
  const link = (href: string, text: string) =>
    h("a", { href, "aria-current": here === href ? "page" : undefined }, text);
  const theme = h(
    "button",
    {
      class: "secondary small",
      id: "theme",
      "aria-label": "switch between dark and light",
      onclick: () => {
        const dark =
          (document.documentElement.dataset.theme ??
            (matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light")) === "dark";
        localStorage.setItem("denv-theme", dark ? "light" : "dark");
        applyTheme();
      },
    },
    "◐",
  );
  show(
    nav,
    h("a", { href: "#/", class: "brand" }, "denv"),
    session
      ? [
          link("#/", "Environments"),
          link("#/projects", "Projects"),
          link("#/hosts", "Hosts"),
          link("#/keys", "Keys"),
          link("#/members", "Members"),
          h("span", { class: "spacer" }),
          h("span", { class: "muted who" }, `${session.user.email} · ${session.team.name} (${session.role})`),
          theme,
          h(
            "button",
            {
              class: "secondary small",
              id: "signout",
              onclick: async () => {
                await api.auth.logout().catch(() => {});
                setCsrf(null);
                go("#/login");
              },
            },
            "Sign out",
          ),
        ]
      : [h("span", { class: "spacer" }), theme],
  );
}

/** Counts renders: one that a newer render overtook while it read the session shows nothing. */
let renders = 0;

async function render(): Promise<void> {
  stopLive();
  stopLive = () => {};
  const [path = "/", query = ""] = location.hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(query);
  const generation = ++renders;
  let session: Session | null;
  try {
    session = await currentSession();
    // The person moved on while the session was read (a link followed at once): the newer
    // render draws the page. Drawn late, this one would replace it, and what was typed there.
    if (generation !== renders) return;
  } catch (err) {
    if (generation !== renders) return;
    // The session could not be read (the server busy or gone): said on the page, never a page
    // left as it was (a form that seems to hang).
    show(main, h("h1", {}, "Something went wrong"), errorBox(err));
    return;
  }
  header(session);
  main.focus({ preventScroll: true });
  try {
    if (path === "/login" || path === "/signup" || path === "/join") {
      signInPage(main, go, {
        signup: path !== "/login",
        invitation: params.get("invitation") ?? undefined,
        next: params.get("then") ?? undefined,
      });
      return;
    }
    if (!session) {
      // Signed out: sign in first, then back to where the person was going.
      go(`#/login?then=${encodeURIComponent(location.hash || "#/")}`);
      return;
    }
    const [, first, id] = path.split("/");
    if (path === "/") await environmentsPage(main, go);
    else if (first === "device") await devicePage(main, session, params.get("code") ?? "");
    else if (first === "env" && id) await environmentPage(main, decodeURIComponent(id), go);
    else if (first === "deployment" && id) stopLive = await deploymentPage(main, decodeURIComponent(id));
    else if (first === "version" && id) await versionPage(main, decodeURIComponent(id), go);
    else if (first === "projects" && id === "new") await newProjectPage(main, go);
    else if (first === "projects") await projectsPage(main, go);
    else if (first === "project" && id) await projectPage(main, decodeURIComponent(id));
    else if (first === "hosts") await hostsPage(main);
    else if (first === "keys") await keysPage(main, () => void render());
    else if (first === "members") await membersPage(main, session, () => void render());
    else show(main, h("h1", {}, "Not found"), h("p", {}, h("a", { href: "#/" }, "Environments")));
  } catch (err) {
    // Another team's object is as unknown as a missing one: the API answered 404, and so do we.
    if (err instanceof ApiError && err.status === 404) show(main, h("h1", {}, "Not found"), errorBox(err));
    else show(main, h("h1", {}, "Something went wrong"), errorBox(err));
  }
}

applyTheme();
window.addEventListener("hashchange", () => void render());
void render();
