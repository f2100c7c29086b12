/**
 * An environment's logs (issue 70): what each service wrote, kept by the engine (bounded and
 * rotated), through the API (NDJSON, every service or one, --tail, --since, --follow), the SDK and
 * `denv logs`; another team sees none of it, and a service's hostile output reaches a terminal
 * harmless.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import Docker from "dockerode";
import { cliRunner } from "../harness/cli-runner.ts";
import { type Lab, openLab } from "../harness/lab.ts";
import { waitFor } from "../harness/wait-for.ts";

const OPSBOX = "127.0.0.1:5000/denv/opsbox:bookworm";
const ENV = encodeURIComponent("logs/e");
let lab: Lab;
const docker = new Docker();
const denv = cliRunner(() => ({ url: lab.server.url, key: lab.keyA }));

// web: a line on each stream at start, a hostile line (an escape sequence, a bell, a long line),
// then a tick every 200 ms ($$: compose's own escape of a dollar); worker: one line.
const WEB =
  "echo web-ready; echo web-warning >&2; printf 'evil \\033]0;owned\\007 \\033[2J end\\n'; " +
  "head -c 100000 /dev/zero | tr '\\0' x; echo; i=0; while :; do i=$$((i+1)); echo tick $$i; sleep 0.2; done";

before(async () => {
  lab = await openLab();
  const compose = `x-denv: { kind: service }
services:
  web:
    image: ${OPSBOX}
    user: "1000:1000"
    command: ["sh", "-c", ${JSON.stringify(WEB)}]
  worker:
    image: ${OPSBOX}
    user: "1000:1000"
    command: ["sh", "-c", "echo worker-ready; exec sleep infinity"]
`;
  await lab.api("POST", "/v1/projects", { name: "logs", kind: "service", source: "./logs" });
  const put = await lab.api("PUT", "/v1/projects/logs/source", { compose });
  assert.equal(put.status, 200, JSON.stringify(put.data));
  const d = await lab.api("POST", "/v1/projects/logs/deploy?wait=true", { env: "e" });
  assert.equal(d.data.status, "succeeded", JSON.stringify(d.data));
});

after(async () => {
  await lab?.close();
});

type Line = { service: string; stream: string; time: string; line: string };

/** GET …/logs with this query: the lines (parsed), or the error answer. */
async function logs(
  query: string,
  key = lab.keyA,
): Promise<{ status: number; lines: Line[]; data: unknown }> {
  const res = await fetch(`${lab.server.url}/v1/envs/${ENV}/logs${query}`, {
    headers: { authorization: `Bearer ${key}` },
  });
  const text = await res.text();
  if (!res.ok) return { status: res.status, lines: [], data: JSON.parse(text) };
  assert.equal(res.headers.get("content-type"), "application/x-ndjson");
  const lines = text
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as Line);
  return { status: res.status, lines, data: null };
}

test("every service's lines, each with its stream and the engine's time; one service's with ?service=", async () => {
  const all = await waitFor("the first ticks written", async () => {
    const r = await logs("");
    return r.lines.some((l) => l.line === "tick 2") ? r : null;
  });
  const find = (service: string, line: string) =>
    all.lines.find((l) => l.service === service && l.line === line);
  assert.equal(find("web", "web-ready")?.stream, "stdout");
  assert.equal(find("web", "web-warning")?.stream, "stderr");
  assert.equal(find("worker", "worker-ready")?.stream, "stdout");
  for (const l of all.lines)
    assert.match(l.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z$/, JSON.stringify(l));
  // By time across services: the engine drops a fraction's trailing zeros, so compare padded.
  const times = all.lines.map((l) =>
    l.time.replace(/(:\d\d)(?:\.(\d+))?Z$/, (_m, s, f = "") => `${s}.${f.padEnd(9, "0")}Z`),
  );
  assert.deepEqual(times, [...times].sort(), "by time across services");
  const web = await logs("?service=web");
  assert.ok(web.lines.length > 0 && web.lines.every((l) => l.service === "web"));
  const none = await logs("?service=nope");
  assert.equal(none.status, 404);
  assert.match(JSON.stringify(none.data), /has no service \\"nope\\"; it has .*web/);
});

test("?tail= gives each service's last lines; ?since= a time or a duration; a bad since is refused", async () => {
  const tail = await logs("?tail=1");
  assert.deepEqual(tail.lines.map((l) => l.service).sort(), ["web", "worker"], JSON.stringify(tail.lines));
  assert.equal(tail.lines.find((l) => l.service === "worker")?.line, "worker-ready");
  const future = await logs(`?since=${encodeURIComponent(new Date(Date.now() + 3600_000).toISOString())}`);
  assert.deepEqual(future.lines, [], "nothing was written in the future");
  const recent = await logs("?since=1h");
  assert.ok(
    recent.lines.some((l) => l.line === "web-ready"),
    "the last hour holds the start",
  );
  const bad = await logs("?since=yesterday");
  assert.equal(bad.status, 400);
  assert.match(JSON.stringify(bad.data), /a time \(2026-12-06T14:00:00Z\) or a duration back/);
});

test("?follow=true goes on with lines written after the request, until the reader goes", async () => {
  // The host's reads of the engine, counted as they are stopped: the reader's going must reach them.
  const runtime = lab.host.denvd.runtime;
  const original = runtime.containerLogLines.bind(runtime);
  let stopped = 0;
  runtime.containerLogLines = (id, options) => {
    const read = original(id, options);
    return {
      lines: read.lines,
      stop: () => {
        stopped++;
        read.stop();
      },
    };
  };
  const fromMs = Date.now();
  const stop = new AbortController();
  const res = await fetch(`${lab.server.url}/v1/envs/${ENV}/logs?follow=true&service=web&tail=0`, {
    headers: { authorization: `Bearer ${lab.keyA}` },
    signal: stop.signal,
  });
  assert.equal(res.status, 200);
  const seen: Line[] = [];
  let buf = "";
  const decoder = new TextDecoder();
  for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
    buf += decoder.decode(chunk, { stream: true });
    const parts = buf.split("\n");
    buf = parts.pop() ?? "";
    for (const p of parts) if (p.trim()) seen.push(JSON.parse(p) as Line);
    if (seen.length >= 3) break;
  }
  stop.abort();
  await waitFor("the host to stop following once the reader went", () => stopped >= 1);
  runtime.containerLogLines = original;
  assert.ok(
    seen.every((l) => /^tick \d+$/.test(l.line)),
    JSON.stringify(seen),
  );
  assert.ok(
    seen.every((l) => Date.parse(l.time.replace(/(\.\d{3})\d+/, "$1")) >= fromMs - 1000),
    "written after the request (tail=0: none from before)",
  );
  // The reader went: the server is free for the next request.
  assert.equal((await logs("?tail=1&service=worker")).lines[0]?.line, "worker-ready");
});

test("a service's hostile output: kept exact in the API, cut at 64 KiB a line, harmless in denv logs", async () => {
  const all = await logs("?service=web");
  const evil = all.lines.find((l) => l.line.startsWith("evil"));
  assert.equal(
    evil?.line,
    "evil \u001b]0;owned\u0007 \u001b[2J end",
    "the API keeps the bytes, JSON-escaped",
  );
  const long = all.lines.filter((l) => /^x+$/.test(l.line));
  assert.ok(long.length >= 1, "the long line is there");
  assert.ok(
    long.every((l) => l.line.length <= 64 * 1024),
    "no entry over 64 KiB",
  );
  const cli = await denv("logs", "logs/e", "--service", "web");
  assert.equal(cli.code, 0, cli.stderr);
  const printed = cli.stdout.split("\n").find((l) => l.includes("evil"));
  assert.equal(
    printed,
    "web | evil \ufffd]0;owned\ufffd \ufffd[2J end",
    "no escape sequence reaches the terminal",
  );
  assert.match(cli.stdout, /^web \| tick \d+$/m);
});

test("another team's key reads no logs; the engine keeps them bounded and rotated", async () => {
  const other = await logs("", lab.keyB);
  assert.equal(other.status, 404);
  const stack = lab.host.denvd.stacks().find((s) => s.name.endsWith("e") && s.containers.web);
  const info = await docker.getContainer(stack?.containers.web as string).inspect();
  assert.deepEqual(info.HostConfig.LogConfig, {
    Type: "json-file",
    Config: { "max-file": "3", "max-size": "10m" },
  });
});

test("the SDK reads them as the API gives them", async () => {
  const got: Line[] = [];
  await lab.client.logs("logs/e", { service: "worker", tail: 5 }, (l) => {
    got.push(l);
  });
  assert.deepEqual(
    got.map((l) => [l.service, l.stream, l.line]),
    [["worker", "stdout", "worker-ready"]],
  );
});
