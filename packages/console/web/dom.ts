/**
 * Building the page: elements made with their text set as text (never parsed as HTML), so what a
 * team's records hold — names, reasons, a verifier's output — cannot become markup or script.
 */
type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | undefined | ((e: Event) => void)>;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === false) continue;
    if (typeof v === "function") el.addEventListener(k.replace(/^on/, ""), v);
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** Replaces what `parent` shows. */
export function show(parent: Element, ...children: (Child | Child[])[]): void {
  parent.replaceChildren();
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    parent.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

/** Where a page sits: Environments, then the environment it belongs to (when given), then itself. */
export function crumbs(here: string, envId?: string): HTMLElement {
  return h(
    "p",
    { class: "crumbs" },
    h("a", { href: "#/" }, "Environments"),
    " / ",
    envId ? [h("a", { href: `#/env/${envId}` }, "environment"), " / "] : null,
    here,
  );
}

/** "3 min ago", "2 h ago": an age people read at a glance (the exact time in the title). */
export function age(iso: string | null | undefined): HTMLElement {
  if (!iso) return h("span", { class: "muted" }, "—");
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  const text =
    s < 60
      ? `${s} s ago`
      : s < 3600
        ? `${Math.round(s / 60)} min ago`
        : s < 86_400
          ? `${Math.round(s / 3600)} h ago`
          : `${Math.round(s / 86_400)} d ago`;
  return h("time", { datetime: iso, title: iso }, text);
}

export function ms(x: number | null | undefined): string {
  if (x === null || x === undefined) return "—";
  return x < 1000 ? `${x} ms` : `${(x / 1000).toFixed(x < 10_000 ? 2 : 1)} s`;
}

export function bytes(x: unknown): string {
  if (typeof x !== "number") return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = x;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(v < 10 && i > 0 ? 1 : 0)} ${units[i]}`;
}

/** A status as a labelled badge (its colour is never the only cue: the word is there). */
export function badge(status: string): HTMLElement {
  return h("span", { class: `badge s-${status.replace(/[^a-z_]/g, "")}` }, status.replace(/_/g, " "));
}

/** A confirmation that names what will happen; resolves true only on the explicit button. */
export function confirmDialog(title: string, detail: string, action: string): Promise<boolean> {
  return new Promise((resolve) => {
    const dialog = h(
      "dialog",
      { class: "confirm", "aria-labelledby": "confirm-title" },
      h("h2", { id: "confirm-title" }, title),
      h("p", {}, detail),
      h(
        "form",
        { method: "dialog" },
        h("button", { value: "cancel", type: "submit", class: "secondary" }, "Cancel"),
        h("button", { value: "ok", type: "submit", class: "danger", id: "confirm-ok" }, action),
      ),
    );
    dialog.addEventListener("close", () => {
      resolve(dialog.returnValue === "ok");
      dialog.remove();
    });
    document.body.append(dialog);
    dialog.showModal();
  });
}

/** An error as people should read it: denv's message, which says what to do next. */
export function errorBox(err: unknown): HTMLElement {
  const message = err instanceof Error ? err.message : String(err);
  return h("p", { class: "error", role: "alert" }, message);
}
