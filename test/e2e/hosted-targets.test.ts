/**
 * The hosted providers as targets, one suite: Daytona (through its official SDK), Modal (its SDK
 * over gRPC) and Prime (its REST API), each against a local double of its published API that runs a
 * sandbox as a container on the engine. One control plane (no denvd host: nothing here runs on
 * one) serves the three. First the path every provider keeps, as the connect-a-target document has
 * a user walk it, run once per provider: `denv cloud connect` (keys it does not take refused, and
 * nothing kept), its row in `/v1/targets`, a sandbox on it by name, commands (output as written,
 * variables and cwd, a timeout, an output limit, the sandbox's own cmd), files, destroy; with what
 * each provider was asked for and what each refuses. Then each provider's own cases: what a hostile
 * request or provider gets, addresses the provider names that the server may not call, snapshots
 * and forks where the provider keeps them, projects pinned to a provider. E2B, whose SDK and wire
 * denv also serves, is e2b-target.test.ts and e2b-sdk.test.ts.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { type DaytonaDouble, startDaytonaDouble } from "../doubles/daytona-double.ts";
import { type ModalDouble, startModalDouble } from "../doubles/modal-double.ts";
import { type PrimeDouble, startPrimeDouble } from "../doubles/prime-double.ts";
import { cliRunner } from "../harness/cli-runner.ts";
import { type Lab, openLab } from "../harness/lab.ts";
import { streamedOutput } from "../harness/stream-proof.ts";
import { filesOf, tarOf } from "../harness/tar-files.ts";
import { LOCAL_REGISTRY } from "../harness/test-host.ts";
import { waitFor } from "../harness/wait-for.ts";

const IMAGE = "127.0.0.1:5000/denv/opsbox:bookworm";
let lab: Lab;
let daytona: DaytonaDouble;
let modal: ModalDouble;
let prime: PrimeDouble;
let denv: ReturnType<typeof cliRunner>;

before(async () => {
  [daytona, modal, prime] = await Promise.all([startDaytonaDouble(), startModalDouble(), startPrimeDouble()]);
  lab = await openLab({
    hosts: 0,
    fetchAllow: [...LOCAL_REGISTRY, ...[daytona, modal, prime].map((d) => new URL(d.url).host)],
  });
  denv = cliRunner(() => ({ url: lab.server.url, key: lab.keyA }));
});

after(async () => {
  if (lab)
    for (const e of (await lab.api("GET", "/v1/envs")).data.environments ?? [])
      await lab.api("DELETE", `/v1/envs/${e.id}?wait=true`);
  await lab?.close();
  await Promise.all([daytona?.close(), modal?.close(), prime?.close()]);
});

const exec = (id: string, body: Record<string, unknown>) => lab.api("POST", `/v1/envs/${id}/exec`, body);
const run = async (id: string, command: string) => {
  const r = await exec(id, { command });
  assert.equal(r.data.exit_code, 0, JSON.stringify(r.data));
  return r.data.stdout as string;
};

/** The double connected as its provider's name, for a test run alone (the first connects it through the CLI). */
async function connect(provider: "daytona" | "modal" | "prime"): Promise<void> {
  if ((await lab.api("GET", "/v1/clouds")).data.clouds.some((c: any) => c.name === provider)) return;
  const double = { daytona, modal, prime }[provider];
  const c = await lab.api("POST", "/v1/clouds", {
    provider,
    name: provider,
    token: provider === "modal" ? modal.token : provider === "daytona" ? daytona.apiKey : prime.apiKey,
    api_url: double.url,
  });
  assert.equal(c.status, 201, JSON.stringify(c.data));
}

/** What differs between the providers on the path every one of them keeps. */
interface Provider {
  name: "daytona" | "modal" | "prime";
  url(): string;
  token(): string;
  /** Keys the provider does not take: each refused by the CLI with what it said, the key not echoed. */
  refused: { token: string; said: RegExp; hidden?: RegExp }[];
  /** Its row's words for what it supports. */
  row(row: any): void;
  /** What the provider was asked for when the sandbox was made. */
  asked(made: any): void;
  /** The sandbox's user, whom commands and files run as. */
  user: string;
  /** A command as another user (root): carried, or refused with the provider's reason. */
  asRoot(answer: { status: number; data: any }): void;
  /** Output arrives as the command writes it. */
  streams: boolean;
  /** The words on the file that went in, each provider's way of carrying files. */
  through: string;
  /** What the provider says of the sandbox once destroyed. */
  destroyed(): void;
  /** Checks of its own, on the running sandbox. */
  more(id: string): Promise<void>;
}

const PROVIDERS: Provider[] = [
  {
    name: "daytona",
    url: () => daytona.url,
    token: () => daytona.apiKey,
    refused: [{ token: "dtn_00", said: /Daytona did not accept the key/ }],
    row(row) {
      assert.match(row.capabilities.multi_service_stack, /^no \(one container per sandbox/);
      assert.match(row.capabilities.egress_deny_verified, /networkBlockAll/);
      assert.ok(!row.supported.includes("verify") && !row.supported.includes("fork"));
    },
    asked(made) {
      // The image, the user and its path, no network, denv's labels.
      const [at] = daytona.sandboxes();
      assert.equal(at?.state, "started");
      assert.equal(at?.user, "daytona");
      assert.equal(at?.networkBlockAll, true, "egress deny is the provider's networkBlockAll");
      assert.equal(at?.labels.denv_name, made.name);
      assert.match(at?.dockerfile ?? "", new RegExp(`^FROM ${IMAGE.replace(/[.]/g, "\\.")}\nRUN `));
      assert.deepEqual(made.services, ["main"]);
    },
    user: "daytona",
    asRoot(r) {
      // Daytona runs everything as the sandbox's user: another is refused, saying so.
      assert.equal(r.status, 400);
      assert.match(r.data.error.message, /as the sandbox's user, daytona; as "root" is not carried/);
    },
    streams: true,
    through: "through the toolbox",
    destroyed: () => assert.equal(daytona.sandboxes()[0]?.state, "destroyed"),
    async more(id) {
      const stat = await lab.api("GET", `/v1/envs/${id}/files/stat?path=${encodeURIComponent("/work/in")}`);
      assert.equal(stat.data.type, "directory");
      assert.equal(stat.data.owner, "daytona");
      const stop = await lab.api("POST", `/v1/envs/${id}/services/main/stop`, {});
      assert.match(stop.data.error.message, /one container with one service: destroy it instead/);
      // Its row says the snapshot is not driven by denv: refused before anything is recorded.
      const snap = await lab.api("POST", `/v1/envs/${id}/snapshot`, {});
      assert.equal(snap.status, 501, JSON.stringify(snap.data));
      assert.equal(snap.data.error.code, "not_supported");
      assert.match(
        snap.data.error.message,
        /target daytona cannot snapshot environment .*: a sandbox's filesystem snapshot \(not driven by denv yet\)/,
      );
      // A fork of it needs that snapshot first: refused the same way.
      const fork = await lab.api("POST", `/v1/envs/${id}/fork`, {});
      assert.equal(fork.status, 501, JSON.stringify(fork.data));
      assert.equal(fork.data.error.code, "not_supported");
    },
  },
  {
    name: "modal",
    url: () => modal.url,
    token: () => modal.token,
    refused: [
      // A token is its id and secret: one part alone is refused, without the token in the message.
      {
        token: "as-onlythesecretpart",
        said: /a Modal token is its id and its secret joined by a colon/,
        hidden: /onlythesecretpart/,
      },
      { token: "ak-0:as-0", said: /Modal did not accept the token: .*Token ID or secret is invalid/ },
    ],
    row(row) {
      assert.match(row.capabilities.egress_deny_verified, /block_network/);
      assert.match(row.capabilities.consistent_snapshot, /filesystem snapshot/);
    },
    asked() {
      const [at] = modal.sandboxes();
      assert.equal(at?.networkBlocked, true, "egress deny is the provider's block_network");
      assert.equal(at?.image, IMAGE, "Modal pulled the image the sandbox names");
    },
    user: "user",
    asRoot: (r) => assert.equal(r.data.stdout, "0\n", "a named user is carried"),
    streams: true,
    through: "through the command router",
    destroyed: () => assert.equal(modal.sandboxes()[0]?.terminated, true),
    async more(id) {
      // Bytes that are not UTF-8 come back as they were (the SDK's binary mode).
      const raw = await exec(id, { command: "printf '\\377\\376ok'", encoding: "base64" });
      assert.deepEqual(Buffer.from(raw.data.stdout, "base64"), Buffer.from([0xff, 0xfe, 0x6f, 0x6b]));
      const missing = await lab.api("GET", `/v1/envs/${id}/files?path=${encodeURIComponent("/work/none")}`);
      assert.equal(missing.status, 404, JSON.stringify(missing.data));
    },
  },
  {
    name: "prime",
    url: () => prime.url,
    token: () => prime.apiKey,
    refused: [{ token: "pit_0", said: /Prime did not accept the key: 401: Invalid API key/ }],
    row(row) {
      assert.match(row.capabilities.egress_deny_verified, /network_access: false/);
    },
    asked(made) {
      const [at] = prime.sandboxes();
      assert.equal(at?.status, "RUNNING");
      assert.equal(at?.networkAccess, false, "egress deny is the provider's network_access");
      assert.ok(at?.labels.includes(`denv_name:${made.name}`));
    },
    user: "user",
    asRoot: (r) => assert.equal(r.data.stdout, "0\n", "a named user is carried"),
    streams: false,
    through: "through the gateway",
    destroyed: () => assert.equal(prime.sandboxes()[0]?.status, "TERMINATED"),
    async more() {},
  },
];

for (const p of PROVIDERS)
  test(`connect ${p.name}, its row, a sandbox on it: commands, a timeout, files and destroy`, async () => {
    const cloud = (token: string) =>
      denv("cloud", "connect", p.name, "--name", p.name, "--token", token, "--api-url", p.url());
    for (const r of p.refused) {
      const wrong = await cloud(r.token);
      assert.notEqual(wrong.code, 0);
      assert.match(wrong.stderr, r.said);
      if (r.hidden) assert.doesNotMatch(wrong.stderr, r.hidden);
      const clouds = (await lab.api("GET", "/v1/clouds")).data.clouds as { name: string }[];
      assert.ok(!clouds.some((c) => c.name === p.name), "nothing is kept of a refused key");
    }
    const ok = await cloud(p.token());
    assert.equal(ok.code, 0, ok.stderr);
    const row = (await lab.api("GET", "/v1/targets")).data.targets.find((t: any) => t.name === p.name);
    assert.equal(row?.type, p.name);
    assert.equal(row.available, true);
    const provider = { daytona: "Daytona", modal: "Modal", prime: "Prime" }[p.name];
    assert.match(row.note, new RegExp(`not against the live ${provider}`));
    p.row(row);

    const made = await lab.api("POST", `/v1/targets/${p.name}/sandboxes`, {
      image: IMAGE,
      cmd: ["sh", "-c", "echo started > /work/cmd.txt; exec sleep infinity"],
      env: { GREETING: "hello from denv" },
    });
    assert.equal(made.status, 201, JSON.stringify(made.data));
    assert.equal(made.data.target, p.name);
    const id = made.data.id as string;
    p.asked(made.data);

    const hello = await exec(id, { command: "echo $GREETING; id -un" });
    assert.equal(hello.status, 200, JSON.stringify(hello.data));
    assert.equal(hello.data.stdout, `hello from denv\n${p.user}\n`, "the agent's commands are not root's");
    p.asRoot(await exec(id, { command: "id -u", user: "root" }));
    const split = await exec(id, { command: "echo out; echo err >&2; exit 3", env: { X: "it's" } });
    assert.deepEqual([split.data.exit_code, split.data.stdout, split.data.stderr], [3, "out\n", "err\n"]);
    // Output comes as the command writes it (the second command is sent only once "ready" arrived).
    if (p.streams)
      assert.equal(
        await streamedOutput({ url: lab.server.url, key: lab.keyA }, id),
        "stdout:ready\nstdout:done\n",
      );
    // Variables and cwd arrive as given, not re-expanded: as shell text and as argv.
    const where = await exec(id, {
      command: 'printf "%s|%s" "$X" "$PWD"',
      env: { X: "it's $HOME" },
      cwd: "/tmp",
    });
    assert.equal(where.data.stdout, "it's $HOME|/tmp");
    const argv = await exec(id, {
      command: ["sh", "-c", 'printf "%s|" "$X" "$PWD"'],
      env: { X: "it's $HOME" },
      cwd: "/tmp",
    });
    assert.equal(argv.data.stdout, "it's $HOME|/tmp|");
    const slow = await exec(id, { command: "sleep 30", timeout_ms: 1000 });
    assert.deepEqual([slow.data.timed_out, slow.data.exit_code], [true, 124], JSON.stringify(slow.data));
    const loud = await exec(id, { command: "head -c 5000 /dev/zero | tr '\\0' a", max_output_bytes: 100 });
    assert.equal(loud.data.stdout.length, 100);
    assert.equal(loud.data.stdout_dropped_bytes, 4900);
    assert.equal(loud.data.stdout_truncated, true);

    // The sandbox's cmd ran in the background, as its user.
    const started = await waitFor(
      "the sandbox's cmd to run",
      async () =>
        (await exec(id, { command: "cat /work/cmd.txt 2>/dev/null || true" })).data.stdout || undefined,
    );
    assert.equal(started, "started\n", "the sandbox's cmd ran in the background");

    const put = await lab.api(
      "PUT",
      `/v1/envs/${id}/files?path=${encodeURIComponent("/work/in")}`,
      await tarOf("note.txt", `${p.through}\n`),
    );
    assert.equal(put.status, 200, JSON.stringify(put.data));
    assert.equal(
      await run(id, "stat -c %U /work/in/note.txt; cat /work/in/note.txt"),
      `${p.user}\n${p.through}\n`,
    );
    const got = await lab.api("GET", `/v1/envs/${id}/files?path=${encodeURIComponent("/work/in/note.txt")}`);
    assert.equal(got.status, 200);
    assert.deepEqual(await filesOf(got.data as Buffer), { "note.txt": `${p.through}\n` });
    await p.more(id);

    const gone = await lab.api("DELETE", `/v1/envs/${id}?wait=true`);
    assert.equal(gone.data.status, "succeeded", JSON.stringify(gone.data));
    p.destroyed();
  });

test("what a hostile request or provider gets from the Daytona driver: a refusal with its reason, nothing kept", async () => {
  await connect("daytona");
  const before = daytona.sandboxes().length;
  const envs = async () =>
    ((await lab.api("GET", "/v1/envs")).data.environments as any[]).filter((e) => e.status !== "destroyed")
      .length;
  const kept = await envs();
  // A user or path is written into the Dockerfile Daytona builds: a newline would be a line of its own.
  for (const [body, why] of [
    [{ image: IMAGE, user: "x\nRUN touch /pwned" }, /user: .* is not a user name/],
    [{ image: IMAGE, user: "Root;id" }, /is not a user name/],
    [{ image: IMAGE, volumes: ["/work\nRUN touch /pwned"] }, /volumes: .* control character/],
    [{ image: `${IMAGE}\nRUN touch /pwned` }, /image: .* control character or space/],
    [{ image: `${IMAGE} AS x` }, /image: .* control character or space/],
  ] as const) {
    const r = await lab.api("POST", "/v1/targets/daytona/sandboxes", body);
    assert.equal(r.status, 400, JSON.stringify(r.data));
    assert.match(r.data.error.message, why);
  }
  assert.equal(daytona.sandboxes().length, before, "nothing was asked of the provider");

  // An id that is not one is refused (and the sandbox it named is deleted), not kept or sent back.
  daytona.nextSandboxId("../../sandbox/other");
  const odd = await lab.api("POST", "/v1/targets/daytona/sandboxes", { image: IMAGE });
  assert.equal(odd.status, 503, JSON.stringify(odd.data));
  assert.match(odd.data.error.message, /answered a sandbox id that is not one/);

  // A provider answering a 500 that is not JSON: the caller hears which target and what failed.
  daytona.fault("POST /sandbox", 500, "<html>upstream fell over</html>");
  const broken = await lab.api("POST", "/v1/targets/daytona/sandboxes", { image: IMAGE });
  assert.equal(broken.status, 503, JSON.stringify(broken.data));
  assert.match(broken.data.error.message, /creating a sandbox from .* on target daytona \(Daytona\) failed/);

  // Another team sees neither the target nor can use it.
  const theirs = await lab.api("GET", "/v1/targets", undefined, lab.keyB);
  assert.ok(!theirs.data.targets.some((t: any) => t.name === "daytona"));
  const use = await lab.api("POST", "/v1/targets/daytona/sandboxes", { image: IMAGE }, lab.keyB);
  assert.equal(use.status, 404);
  assert.equal(await envs(), kept, "no environment was kept");
});

test("a multi-service project pinned to daytona (or whose file names it) is refused at prepare, naming the target and its limit", async () => {
  await connect("daytona");
  const compose = `x-denv: { kind: service }\nservices:\n  web: { image: ${IMAGE}, command: ["sleep", "infinity"] }\n  db: { image: ${IMAGE}, command: ["sleep", "infinity"] }\n`;
  assert.equal(
    (
      await lab.api("POST", "/v1/projects", {
        name: "pinned",
        kind: "service",
        source: "./pinned",
        pinned_target: "daytona",
      })
    ).status,
    201,
  );
  assert.equal((await lab.api("PUT", "/v1/projects/pinned/source", { compose })).status, 200);
  const before = daytona.sandboxes().length;
  const d = await lab.api("POST", "/v1/projects/pinned/deploy?wait=true", { env: "alpha" });
  assert.equal(d.data.status, "rolled_back", JSON.stringify(d.data).slice(0, 400));
  const prepare = d.data.phases.find((p: any) => p.name === "prepare");
  assert.equal(prepare.status, "failed");
  assert.match(
    prepare.reason,
    /pinned to daytona, a hosted daytona target, which runs one container per environment: this compose file has 2 services \(web, db\)/,
  );
  assert.equal(daytona.sandboxes().length, before, "nothing was made at the provider");
  // The file's own x-denv.target places it there too, and is refused the same way.
  const named = compose.replace("x-denv: { kind: service }", "x-denv: { kind: service, target: daytona }");
  assert.equal(
    (await lab.api("POST", "/v1/projects", { name: "named", kind: "service", source: "./named" })).status,
    201,
  );
  assert.equal((await lab.api("PUT", "/v1/projects/named/source", { compose: named })).status, 200);
  const n = await lab.api("POST", "/v1/projects/named/deploy?wait=true", { env: "alpha" });
  assert.equal(n.data.status, "rolled_back", JSON.stringify(n.data).slice(0, 400));
  assert.match(
    n.data.phases.find((p: any) => p.name === "prepare").reason,
    /x-denv.target names daytona, a hosted daytona target, which runs one container per environment/,
  );
  assert.equal(daytona.sandboxes().length, before, "nothing was made at the provider");
});

test("a sandbox on Modal is snapshotted there as a version (an image), forked from it, and the image deleted with it", async () => {
  await connect("modal");
  const made = await lab.api("POST", "/v1/targets/modal/sandboxes", { image: IMAGE, name: "snap-src" });
  assert.equal(made.status, 201, JSON.stringify(made.data));
  const src = made.data.id as string;
  await run(src, "echo before > /work/state.txt");
  const snap = await lab.api("POST", `/v1/envs/${src}/snapshot?wait=true`);
  assert.equal(snap.data.status, "succeeded", JSON.stringify(snap.data));
  const versionId = (await lab.api("GET", `/v1/envs/${src}`)).data.current_version_id as string;
  const version = (await lab.api("GET", `/v1/versions/${versionId}`)).data;
  assert.equal(version.target, "modal");
  assert.equal(version.evidence.provider, "Modal");
  const ref = version.evidence.snapshot_ref as string;
  assert.ok(modal.images().has(ref), `${ref} is an image at Modal`);
  await run(src, "echo after > /work/state.txt");

  const fork = await lab.api("POST", "/v1/sandboxes", { from_version: versionId, name: "modal-fork" });
  assert.equal(fork.status, 201, JSON.stringify(fork.data));
  assert.equal(fork.data.target, "modal");
  assert.equal(await run(fork.data.id, "cat /work/state.txt; id -un"), "before\nuser\n");
  assert.equal(await run(src, "cat /work/state.txt"), "after\n");
  const forked = modal.sandboxes().find((s) => s.image.includes(ref));
  assert.equal(forked?.networkBlocked, true, "a fork's egress is denied");

  for (const e of [fork.data.id, src]) await lab.api("DELETE", `/v1/envs/${e}?wait=true`);
  const del = await lab.api("DELETE", `/v1/versions/${versionId}`);
  assert.ok(del.status < 300, JSON.stringify(del.data));
  assert.ok(!modal.images().has(ref), "deleting the version deleted Modal's image");
});

test("a command router the provider names is dialled only when the server may call it; another team gets nothing", async () => {
  await connect("modal");
  const live = () => modal.sandboxes().filter((s) => !s.terminated).length;
  const before = live();
  const seen = modal.seen.length;
  // An address outside the fetch policy (loopback, another port): the SDK would carry the
  // sandbox's token there. It is refused before a call is made, and the sandbox is ended.
  modal.routerUrl("https://127.0.0.2:9");
  try {
    const elsewhere = await lab.api("POST", "/v1/targets/modal/sandboxes", { image: IMAGE });
    assert.equal(elsewhere.status, 403, JSON.stringify(elsewhere.data));
    assert.match(
      elsewhere.data.error.message,
      /Modal's command router: 127\.0\.0\.2:9 is not a host this server fetches from/,
    );
  } finally {
    modal.routerUrl(null);
  }
  assert.equal(live(), before, "the refused sandbox was terminated at the provider");
  const calls = modal.seen.slice(seen);
  assert.ok(!calls.some((m) => m.startsWith("TaskExec")), calls.join(", "));

  const ok = await lab.api("POST", "/v1/targets/modal/sandboxes", { image: IMAGE });
  assert.equal(ok.status, 201, JSON.stringify(ok.data));
  const theirs = await lab.api("POST", `/v1/envs/${ok.data.id}/exec`, { command: "id" }, lab.keyB);
  assert.equal(theirs.status, 404);
  const notTheirs = await lab.api("POST", "/v1/targets/modal/sandboxes", { image: IMAGE }, lab.keyB);
  assert.equal(notTheirs.status, 404);
});

test("a gateway the provider names is called only when the server may call it, and a hostile answer is refused", async () => {
  await connect("prime");
  const live = () => prime.sandboxes().filter((s) => s.status !== "TERMINATED").length;
  const before = live();
  const seen = prime.seen.length;
  // An address outside the fetch policy (loopback, another port): refused before anything is sent.
  prime.nextAuth({ gateway_url: "http://127.0.0.2:9/steal" });
  const elsewhere = await lab.api("POST", "/v1/targets/prime/sandboxes", { image: IMAGE });
  assert.equal(elsewhere.status, 403, JSON.stringify(elsewhere.data));
  assert.match(
    elsewhere.data.error.message,
    /gateway_url: 127\.0\.0\.2:9 is not a host this server fetches from/,
  );
  // A path segment that is not an id would climb out of the gateway's path.
  prime.nextAuth({ user_ns: "..", job_id: "../../api/v1/sandbox" });
  const climbing = await lab.api("POST", "/v1/targets/prime/sandboxes", { image: IMAGE });
  assert.equal(climbing.status, 503, JSON.stringify(climbing.data));
  assert.match(climbing.data.error.message, /no gateway path or token that is one/);
  // Each refused sandbox was deleted at the provider; nothing reached a gateway.
  assert.equal(live(), before);
  assert.ok(!prime.seen.slice(seen).some((r) => r.includes("/gateway/")), prime.seen.slice(seen).join(", "));

  // An answer without end is read only so far: the server's memory is not the provider's to fill.
  prime.fault("GET /api/v1/sandbox", 200, `{"sandboxes": "${"x".repeat(2 * 1024 * 1024)}"}`);
  const endless = await lab.api("POST", "/v1/clouds", {
    provider: "prime",
    name: "prime-too",
    token: prime.apiKey,
    api_url: prime.url,
  });
  assert.equal(endless.status, 400, JSON.stringify(endless.data));
  assert.match(endless.data.error.message, /Prime did not accept the key: an answer over 1048576 bytes/);

  prime.fault("POST /api/v1/sandbox", 500, "<html>upstream fell over</html>");
  const broken = await lab.api("POST", "/v1/targets/prime/sandboxes", { image: IMAGE });
  assert.equal(broken.status, 503);
  assert.match(
    broken.data.error.message,
    /creating a sandbox from .* on target prime \(Prime\) failed: 500: <html>/,
  );

  const theirs = await lab.api("POST", "/v1/targets/prime/sandboxes", { image: IMAGE }, lab.keyB);
  assert.equal(theirs.status, 404);
});

test("a project pinned to prime deploys its one service there; Prime keeps no snapshot, so the deploy keeps no version", async () => {
  await connect("prime");
  const compose = `x-denv: { kind: service }\nservices:\n  web: { image: ${IMAGE}, command: ["sh", "-c", "echo up > /work/up.txt; exec sleep infinity"] }\n`;
  const made = await lab.api("POST", "/v1/projects", {
    name: "on-prime",
    kind: "service",
    source: "./on-prime",
    pinned_target: "prime",
  });
  assert.equal(made.status, 201, JSON.stringify(made.data));
  assert.equal((await lab.api("PUT", "/v1/projects/on-prime/source", { compose })).status, 200);
  const d = await lab.api("POST", "/v1/projects/on-prime/deploy?wait=true", { env: "alpha" });
  assert.equal(d.data.status, "succeeded", JSON.stringify(d.data).slice(0, 600));
  const snapshot = d.data.phases.find((p: any) => p.name === "snapshot");
  assert.equal(snapshot.status, "skipped");
  assert.match(snapshot.reason, /target prime has no snapshot denv drives .*no version is kept/);
  const env = (await lab.api("GET", `/v1/envs/${d.data.environment_id}`)).data;
  assert.deepEqual([env.target, env.status, env.current_version_id], ["prime", "running", null]);
  const up = await waitFor(
    "the service's command to run",
    async () =>
      (await exec(env.id, { command: "cat /work/up.txt 2>/dev/null || true" })).data.stdout || undefined,
  );
  assert.equal(up, "up\n", "the service's command ran");
});
