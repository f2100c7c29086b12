/**
 * A deployment: its phases as a timeline (each bar as long as the phase took), updated live from
 * the deployment's event stream while it runs, and each phase's evidence laid out to be read —
 * digests, caps read back, the frozen window, the egress probe, the reward and what verify
 * collected and refused — rather than as raw JSON.
 */
import { type Answer, api } from "./console-api.ts";
import { diffHeadline, diffView } from "./diff-view.ts";
import { age, badge, crumbs, h, ms, show } from "./dom.ts";

type Deployment = Answer<"getV1DeploymentsById">;
type Phase = Deployment["phases"][number];

/** The facts a reader looks for first in a phase's evidence, when it has them. */
const HEADLINES: [string, (v: unknown) => string | null][] = [
  ["reward", (v) => (typeof v === "number" ? `reward ${v}` : null)],
  ["frozen_ms", (v) => (typeof v === "number" ? `frozen ${v} ms` : null)],
  ["result", (v) => (typeof v === "string" ? `egress ${v}` : null)],
  ["version_id", (v) => (typeof v === "string" ? `version ${v}` : null)],
  ["host_name", (v) => (typeof v === "string" ? `host ${v}` : null)],
  ["refused", (v) => (typeof v === "string" ? `refused: ${v}` : null)],
  [
    "admission",
    (v) => {
      const ms = (v as { waited_ms?: unknown } | null)?.waited_ms;
      return typeof ms === "number" && ms > 0 ? `waited ${ms} ms for a create turn` : null;
    },
  ],
];

/** Any evidence as nested definition lists: keys as labels, long text as blocks, lists as lists. */
export function evidenceView(value: unknown, depth = 0): HTMLElement {
  if (value === null || value === undefined) return h("span", { class: "muted" }, "—");
  if (typeof value === "string") {
    if (value.includes("\n") || value.length > 160) return h("pre", { class: "text" }, value);
    return /^sha256:[0-9a-f]{64}$|@sha256:/.test(value)
      ? h("code", { class: "digest" }, value)
      : h("span", {}, value);
  }
  if (typeof value !== "object") return h("span", {}, String(value));
  if (depth > 5) return h("pre", { class: "text" }, JSON.stringify(value, null, 1).slice(0, 2000));
  if (Array.isArray(value)) {
    if (value.length === 0) return h("span", { class: "muted" }, "none");
    if (value.every((x) => typeof x !== "object" || x === null))
      return value.some((x) => String(x).length > 60)
        ? h("pre", { class: "text" }, value.join("\n"))
        : h("span", {}, value.map(String).join(", "));
    return h(
      "ol",
      { class: "ev-list" },
      value.slice(0, 200).map((x) => h("li", {}, evidenceView(x, depth + 1))),
    );
  }
  const entries = Object.entries(value as Record<string, unknown>);
  if (entries.length === 0) return h("span", { class: "muted" }, "none");
  return h(
    "dl",
    { class: "evidence" },
    entries
      .slice(0, 200)
      .flatMap(([k, v]) => [h("dt", {}, k.replace(/_/g, " ")), h("dd", {}, evidenceView(v, depth + 1))]),
  );
}

/** A verify's diff phase (its evidence the diff itself), shown as a diff rather than as fields. */
function isDiff(p: Phase): p is Phase & { evidence: Parameters<typeof diffView>[0] } {
  const ev = p.evidence as { summary?: unknown; entries?: unknown } | null;
  return p.name === "diff" && !!ev && typeof ev.summary === "object" && Array.isArray(ev.entries);
}

function headline(p: Phase): string {
  if (isDiff(p)) return diffHeadline(p.evidence);
  const ev = p.evidence;
  if (!ev || typeof ev !== "object" || Array.isArray(ev)) return "";
  const found: string[] = [];
  for (const [key, say] of HEADLINES) {
    const s = say((ev as Record<string, unknown>)[key]);
    if (s) found.push(s);
  }
  return found.join(" · ");
}

/**
 * A bar as long as its share of the longest phase. Its width is set through the CSSOM: the page's
 * content security policy refuses style attributes written into the markup.
 */
function bar(share: number): HTMLElement {
  const fill = h("span", {});
  fill.style.width = `${Math.round(share * 100)}%`;
  return h("span", { class: "bar", "aria-hidden": "true" }, fill);
}

function timeline(d: Deployment): HTMLElement {
  const total = Math.max(1, ...d.phases.map((p) => p.duration_ms ?? 0));
  return h(
    "ol",
    { class: "timeline", "aria-label": "phases" },
    d.phases.map((p) =>
      h(
        "li",
        { class: `phase s-${p.status}`, id: `phase-${p.name}` },
        h(
          "details",
          { open: p.status === "failed" || isDiff(p) },
          h(
            "summary",
            {},
            h("span", { class: "phase-name" }, p.name),
            badge(p.status),
            bar((p.duration_ms ?? 0) / total),
            h("span", { class: "dur" }, p.status === "skipped" ? "" : ms(p.duration_ms)),
            h("span", { class: "muted headline" }, headline(p)),
          ),
          p.reason ? h("p", { class: "reason" }, p.reason) : null,
          isDiff(p)
            ? diffView(p.evidence)
            : p.evidence !== null && p.evidence !== undefined
              ? evidenceView(p.evidence)
              : h("p", { class: "muted" }, "no evidence recorded"),
        ),
      ),
    ),
  );
}

function view(main: HTMLElement, d: Deployment): void {
  const verdict = d.verify
    ? h(
        "p",
        { class: "verdict" },
        "reward ",
        h("strong", { id: "reward" }, String(d.verify.reward)),
        d.verify.reason ? ` — ${d.verify.reason}` : "",
      )
    : null;
  show(
    main,
    crumbs(d.id, d.environment_id),
    h("h1", {}, `${d.kind} `, h("span", { id: "deployment-status" }, badge(d.status))),
    h(
      "p",
      { class: "muted" },
      "started ",
      age(d.created_at),
      d.finished_at ? ` · took ${ms(Date.parse(d.finished_at) - Date.parse(d.created_at))}` : " · running",
    ),
    d.reason ? h("p", { class: "reason", id: "deployment-reason" }, d.reason) : null,
    verdict,
    timeline(d),
  );
}

/** The page, live until the deployment's verdict; returns how to stop listening. */
export async function deploymentPage(main: HTMLElement, id: string): Promise<() => void> {
  const d = await api.deployments.get(id);
  view(main, d);
  if (d.status !== "running" && d.status !== "queued") return () => {};
  const events = new EventSource(`/v1/deployments/${encodeURIComponent(id)}/events`);
  events.addEventListener("deployment", (e) => {
    const next = JSON.parse((e as MessageEvent<string>).data) as Deployment;
    // Keep the phases the reader opened open across updates.
    const open = new Set([...main.querySelectorAll("details[open]")].map((x) => x.parentElement?.id));
    view(main, next);
    for (const pid of open) main.querySelector(`#${CSS.escape(pid ?? "")} details`)?.setAttribute("open", "");
    if (next.status !== "running" && next.status !== "queued") events.close();
  });
  events.addEventListener("error", () => events.close());
  return () => events.close();
}
