/**
 * A version's data sheet: what the version is (images by digest, volumes and their sizes, caps,
 * egress, the clock and its reach), how it replayed, every promote that took it through the gates
 * with each gate's evidence, and the verify results seen on its forks. JSON for programs,
 * Markdown for people (`denv datasheet`); both from the records, nothing recomputed.
 */
import { bytesText, type ClockEvidence, type ResolvedSpec } from "@denv/protocol";
import type { SecretBox } from "../clouds/secret-box.ts";
import type { ReplayResult } from "../deployments/replay-runner.ts";
import { environmentDeploymentsOfKinds, teamDeploymentsOfKind } from "../store/deployment-store.ts";
import type { Store } from "../store/open-store.ts";
import { versionReplays } from "../store/replay-store.ts";
import type { DeploymentsTable, VersionsTable } from "../store/schema.ts";
import { versionHost, versionPlace } from "../store/version-store.ts";

interface PhaseRow {
  name: string;
  status: string;
  reason: string | null;
  evidence: unknown;
}

export interface Datasheet {
  version: {
    id: string;
    project: string;
    environment: string;
    kind: string;
    host_id: string;
    spec_hash: string;
    created_at: string;
    images: Record<string, string>;
  };
  clock: {
    mode: string;
    /** The time every fork of the version starts at. */
    at: string | null;
    /** Per service, whether its program reads the frozen clock (the deploy's start evidence). */
    reach: Record<
      string,
      { frozen: boolean; program: string | null; linkage: string; reason: string | null }
    > | null;
    warnings: string[];
  };
  volumes: Record<string, { bytes: number | null; snapshot_id: string | null }>;
  frozen_ms: number | null;
  /**
   * A live version's processes (null: a version of volumes only): each service's checkpoint and
   * container layer sizes and its dump's time, and the services kept disk-only with why.
   */
  live: {
    services: Record<string, { checkpoint_bytes: number; layer_bytes: number; dump_ms: number }>;
    skipped: Record<string, string>;
  } | null;
  caps: Record<string, { memory_bytes: number; pids: number; cpus: number }>;
  egress: string;
  agent: string | null;
  verifier: { image: string | null; collect: string[] } | null;
  replays: {
    id: string;
    status: string;
    forks: number;
    identical: boolean | null;
    first_divergence: unknown;
    /** What the episode changed (the reference fork's counts), and whether every fork agreed. */
    diff: {
      identical: boolean | null;
      summary: {
        created: number;
        deleted: number;
        modified: number;
        bytes_added: number;
        bytes_removed: number;
      };
      changes: string[];
    } | null;
    created_at: string;
  }[];
  promotes: {
    deployment_id: string;
    target: string;
    status: string;
    reason: string | null;
    created_at: string;
    gates: PhaseRow[];
  }[];
  verifies: {
    deployment_id: string;
    environment: string;
    status: string;
    reward: number | null;
    created_at: string;
  }[];
}

const phasesOf = (d: DeploymentsTable) => JSON.parse(d.phases_json) as PhaseRow[];
const evidenceOf = (d: DeploymentsTable, phase: string) =>
  (phasesOf(d).find((p) => p.name === phase)?.evidence ?? null) as Record<string, unknown> | null;

export async function buildDatasheet(
  store: Store,
  secrets: SecretBox,
  version: VersionsTable,
): Promise<Datasheet> {
  const hostId = versionHost(version, "a datasheet");
  const spec = JSON.parse(secrets.openText(version.spec_json)) as ResolvedSpec;
  const evidence = JSON.parse(version.evidence_json) as {
    frozen_ms?: number;
    datasets?: Record<string, { snapshot_id: string; bytes: number }>;
    clock?: { mode: string; at: string };
    live?: Datasheet["live"];
  };
  const place = await versionPlace(store, version);
  // The deployment that made the version: its start phase read each service's clock.
  const madeBy = (
    await environmentDeploymentsOfKinds(store, version.environment_id, ["deploy", "snapshot"])
  ).find((d) => evidenceOf(d, "snapshot")?.version_id === version.id);
  const startClock = madeBy ? (evidenceOf(madeBy, "start")?.clock as ClockEvidence | undefined) : undefined;
  // Promotes: the team's (a candidate names its version in its evidence); verifies: only those of
  // forks of this version, the newest 50, filtered in the query (a team may have many thousands).
  const teamPromotes = await teamDeploymentsOfKind(store, version.team_id, "promote");
  const promotes = teamPromotes
    .filter((d) => evidenceOf(d, "candidate")?.version_id === version.id)
    .map((d) => ({
      deployment_id: d.id,
      target: d.env_name,
      status: d.status,
      reason: d.reason,
      created_at: d.created_at,
      gates: phasesOf(d).map((p) => ({
        name: p.name,
        status: p.status,
        reason: p.reason ?? null,
        evidence: p.evidence,
      })),
    }));
  const forkVerifies = await teamDeploymentsOfKind(store, version.team_id, "verify", {
    forksOf: version.id,
    limit: 50,
  });
  const verifies = forkVerifies.reverse().map((d) => {
    const v = evidenceOf(d, "verdict");
    return {
      deployment_id: d.id,
      environment: d.env_name,
      status: d.status,
      reward: typeof v?.reward === "number" ? v.reward : null,
      created_at: d.created_at,
    };
  });
  const replays = (await versionReplays(store, version.team_id, version.id)).map((r) => {
    const rep = r.report_json
      ? (JSON.parse(r.report_json) as {
          identical?: boolean;
          first_divergence?: unknown;
          diff?: Pick<ReplayResult["diff"], "identical" | "reference">;
        })
      : null;
    const ref = rep?.diff?.reference;
    const req = JSON.parse(r.request_json) as { forks: number };
    return {
      id: r.id,
      status: r.status,
      forks: req.forks,
      identical: typeof rep?.identical === "boolean" ? rep.identical : null,
      first_divergence: rep?.first_divergence ?? null,
      diff: ref
        ? {
            identical: rep?.diff?.identical ?? null,
            summary: ref.summary,
            changes: ref.entries.slice(0, 50).map((e) => `${e.change} ${e.volume}/${e.path}`),
          }
        : null,
      created_at: r.created_at,
    };
  });
  return {
    version: {
      id: version.id,
      project: place.project,
      environment: place.environment,
      kind: spec.kind,
      host_id: hostId,
      spec_hash: version.spec_hash,
      created_at: version.created_at,
      images: Object.fromEntries(
        Object.entries(spec.services).map(([svc, s]) => [svc, s.image_pinned ?? s.image]),
      ),
    },
    clock: {
      mode: spec.clock,
      at: evidence.clock?.at ?? null,
      reach: startClock?.services ?? null,
      warnings: startClock?.warnings ?? [],
    },
    volumes: Object.fromEntries(
      Object.keys(spec.datasets).map((v) => [
        v,
        {
          bytes: evidence.datasets?.[v]?.bytes ?? null,
          snapshot_id: evidence.datasets?.[v]?.snapshot_id ?? null,
        },
      ]),
    ),
    frozen_ms: evidence.frozen_ms ?? null,
    live: evidence.live ?? null,
    caps: Object.fromEntries(Object.entries(spec.services).map(([svc, s]) => [svc, s.caps])),
    // A policy is written out whole: what the version's forks may reach is part of what it is.
    egress: spec.egress_policy
      ? `policy: allow ${spec.egress_policy.allow.join(", ") || "nothing"}${spec.egress_policy.deny.length ? `; deny ${spec.egress_policy.deny.join(", ")}` : ""}`
      : spec.egress,
    agent: spec.agent?.service ?? null,
    verifier: spec.verifier
      ? { image: spec.verifier.image_pinned ?? spec.verifier.image ?? null, collect: spec.verifier.collect }
      : null,
    replays,
    promotes,
    verifies,
  };
}

const cell = (v: unknown) =>
  String(v ?? "")
    .replaceAll("|", "\\|")
    .replaceAll("\n", " ");
/** Inline code no content can close: its backticks outnumber any run inside. */
function inlineCode(s: string): string {
  const longest = Math.max(0, ...[...s.matchAll(/`+/g)].map((m) => m[0].length));
  const tick = "`".repeat(longest + 1);
  return `${tick} ${s.replaceAll("\n", " ")} ${tick}`;
}

/** A code block no content can close: its fence is longer than any run of backticks inside. */
function fence(v: unknown): string {
  const text = JSON.stringify(v, null, 2);
  const longest = Math.max(0, ...(text.match(/`+/g) ?? []).map((m) => m.length));
  const f = "`".repeat(Math.max(3, longest + 1));
  return `${f}json\n${text}\n${f}`;
}

/**
 * A gate's evidence, a line a field: values as they are, lists and records by their size and keys.
 * The whole of it is the JSON sheet's (`--json`); here it is what a person scans.
 */
function evidenceLines(v: unknown): string[] {
  if (!v || typeof v !== "object" || Array.isArray(v)) return [fence(v)];
  return Object.entries(v as Record<string, unknown>).map(([k, x]) => {
    if (x === null || typeof x !== "object") {
      const text = String(x);
      return `- ${cell(k)}: ${inlineCode(text.length > 160 ? `${text.slice(0, 160)}…` : text)}`;
    }
    if (Array.isArray(x)) return `- ${cell(k)}: ${x.length} item${x.length === 1 ? "" : "s"}`;
    const keys = Object.keys(x);
    return `- ${cell(k)}: ${keys.length} field${keys.length === 1 ? "" : "s"} (${keys.slice(0, 6).map(cell).join(", ")}${keys.length > 6 ? ", …" : ""})`;
  });
}

/** The sheet in a few lines: what a reader wants before the tables. */
function summaryLines(d: Datasheet): string[] {
  const sizes = Object.values(d.volumes).map((x) => x.bytes);
  const total = sizes.every((b) => b !== null)
    ? bytesText(sizes.reduce<number>((n, b) => n + (b ?? 0), 0))
    : "unknown";
  const latest = <T extends { created_at: string }>(xs: T[]) =>
    [...xs].sort((a, b) => b.created_at.localeCompare(a.created_at))[0];
  const lastReplay = latest(d.replays);
  const lastPromote = latest(d.promotes);
  const rewards = d.verifies.map((x) => x.reward).filter((r): r is number => r !== null);
  return [
    `- services: ${Object.keys(d.version.images).length} (${Object.keys(d.version.images).map(cell).join(", ")})`,
    `- volumes: ${Object.keys(d.volumes).length}, ${total} in all; frozen for ${d.frozen_ms ?? "unknown"} ms to snapshot them`,
    `- clock: ${d.clock.mode}${d.clock.at ? ` from ${d.clock.at}` : ""}; egress ${d.egress}`,
    `- replays: ${d.replays.length ? `${d.replays.length}, the last ${lastReplay?.status}` : "none yet"}`,
    `- promotes: ${d.promotes.length ? `${d.promotes.length}, the last to ${lastPromote?.target} ${lastPromote?.status}` : "none yet"}`,
    `- verifies on its forks: ${d.verifies.length ? `${d.verifies.length}${rewards.length ? `, mean reward ${(rewards.reduce((a, b) => a + b, 0) / rewards.length).toFixed(2)}` : ""}` : "none yet"}`,
  ];
}

/** The data sheet for people: a summary, then the same content as Markdown (sizes in units). */
export function datasheetMarkdown(d: Datasheet): string {
  const out: string[] = [];
  const v = d.version;
  out.push(`# Data sheet: ${v.project}@${v.id}`, "");
  out.push(
    `Made in ${v.environment} on ${v.created_at}, kind ${v.kind}, spec ${v.spec_hash}, host ${v.host_id}.`,
    "",
  );
  out.push(...summaryLines(d), "", "Every figure in full: `denv datasheet --json`.", "");
  out.push("## Images", "", "| service | image |", "| --- | --- |");
  for (const [svc, img] of Object.entries(v.images)) out.push(`| ${cell(svc)} | ${cell(img)} |`);
  out.push("", "## Volumes", "", "| volume | size | snapshot |", "| --- | --- | --- |");
  for (const [vol, x] of Object.entries(d.volumes))
    out.push(`| ${cell(vol)} | ${bytesText(x.bytes)} | ${cell(x.snapshot_id)} |`);
  out.push("", `Frozen window: ${d.frozen_ms ?? "unknown"} ms.`, "");
  if (d.live) {
    out.push(
      "## Processes (a live version)",
      "",
      "| service | checkpoint | layer | dump |",
      "| --- | --- | --- | --- |",
    );
    for (const [svc, x] of Object.entries(d.live.services))
      out.push(
        `| ${cell(svc)} | ${bytesText(x.checkpoint_bytes)} | ${bytesText(x.layer_bytes)} | ${x.dump_ms} ms |`,
      );
    for (const [svc, why] of Object.entries(d.live.skipped))
      out.push(`| ${cell(svc)} | disk-only: ${cell(why)} | | |`);
    out.push("");
  }
  out.push("## Caps and egress", "", "| service | memory | pids | cpus |", "| --- | --- | --- | --- |");
  for (const [svc, c] of Object.entries(d.caps))
    out.push(`| ${cell(svc)} | ${bytesText(c.memory_bytes)} | ${c.pids} | ${c.cpus} |`);
  out.push("", `Egress: ${d.egress}. Agent: ${d.agent ?? "none"}.`);
  if (d.verifier)
    out.push(
      `Verifier: ${d.verifier.image ?? "in a service"}, collects ${d.verifier.collect.join(", ") || "nothing"}.`,
    );
  out.push(
    "",
    "## Clock",
    "",
    `Mode: ${d.clock.mode}. Forks start at: ${d.clock.at ?? "the real time"}.`,
    "",
  );
  if (d.clock.reach) {
    out.push("| service | frozen | program | linkage | reason |", "| --- | --- | --- | --- | --- |");
    for (const [svc, r] of Object.entries(d.clock.reach))
      out.push(
        `| ${cell(svc)} | ${r.frozen ? "yes" : "**no**"} | ${cell(r.program)} | ${r.linkage} | ${cell(r.reason)} |`,
      );
    out.push("");
  }
  for (const w of d.clock.warnings) out.push(`- warning: ${w}`);
  out.push("## Replays", "");
  if (d.replays.length === 0) out.push("None yet: `denv replay` runs one.", "");
  for (const r of d.replays) {
    out.push(`- ${r.id} (${r.created_at}): ${r.forks} forks, **${r.status}**`);
    if (r.diff) {
      const s = r.diff.summary;
      const same =
        r.diff.identical === null
          ? ""
          : r.diff.identical
            ? "; every fork's the same"
            : "; **forks' diffs differ**";
      out.push(`  - changed: ${s.created} created, ${s.modified} modified, ${s.deleted} deleted${same}`);
      for (const c of r.diff.changes) out.push(`    - ${inlineCode(c)}`);
    }
    if (r.first_divergence) out.push("", fence(r.first_divergence), "");
  }
  out.push("", "## Promotes", "");
  if (d.promotes.length === 0) out.push("None yet: `denv promote` runs the gates.", "");
  for (const p of d.promotes) {
    out.push(`### ${p.deployment_id} → ${p.target}: ${p.status}`, "");
    if (p.reason) out.push(`Reason: ${p.reason}`, "");
    for (const g of p.gates) {
      out.push(`#### ${g.name}: ${g.status}`, "");
      if (g.reason) out.push(`Reason: ${g.reason}`, "");
      if (g.evidence !== null && g.evidence !== undefined) out.push(...evidenceLines(g.evidence), "");
    }
  }
  out.push("## Verify results on its forks", "");
  if (d.verifies.length === 0) out.push("None yet.", "");
  else {
    out.push("| deployment | environment | status | reward | when |", "| --- | --- | --- | --- | --- |");
    for (const x of d.verifies)
      out.push(
        `| ${x.deployment_id} | ${cell(x.environment)} | ${x.status} | ${x.reward ?? ""} | ${x.created_at} |`,
      );
    out.push("");
  }
  return `${out.join("\n")}\n`;
}
