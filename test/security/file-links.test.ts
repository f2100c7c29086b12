/**
 * Issue 33, attack 3: the agent (uid 1000) plants `ln -s /etc /home/ubuntu/d`; a harness then works
 * on files as root. Every file operation — PUT and the parents it makes, GET, stat, list, mkdir,
 * rename, DELETE — walks the path one component at a time without following a link, refuses the
 * link with `invalid_path` naming it, and leaves /etc as it was. Then the same with the link swapped
 * in and out while root writes, 150 times: nothing ever lands in /etc. Real host, engine and agent.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import tar from "tar-stream";
import { type ApiAnswer, type Lab, openLab } from "../harness/lab.ts";
import { waitFor } from "../harness/wait-for.ts";

let lab: Lab;
let box: string;

async function tarOf(entries: { name: string; body?: string; dir?: boolean }[]): Promise<Uint8Array> {
  const pack = tar.pack();
  for (const e of entries)
    if (e.dir) pack.entry({ name: e.name, type: "directory", mode: 0o755 });
    else pack.entry({ name: e.name, mode: 0o644 }, e.body ?? "x");
  pack.finalize();
  const chunks: Buffer[] = [];
  for await (const c of pack) chunks.push(c as Buffer);
  return new Uint8Array(Buffer.concat(chunks));
}

const q = (path: string) => `path=${encodeURIComponent(path)}&user=root`;

async function sh(command: string, user = "1000:1000"): Promise<string> {
  const r = await lab.api("POST", `/v1/envs/${box}/exec`, { command: ["sh", "-c", command], user });
  assert.equal(r.data.exit_code, 0, JSON.stringify(r.data));
  return r.data.stdout as string;
}

function refusedAsLink(r: ApiAnswer, component: string): void {
  assert.equal(r.status, 400, JSON.stringify(r.data));
  assert.equal(r.data.error.code, "invalid_path", JSON.stringify(r.data));
  assert.match(r.data.error.message, new RegExp(`${component} is a symbolic link`));
}

before(async () => {
  lab = await openLab();
  const made = await lab.api("POST", "/v1/sandboxes", {
    image: "127.0.0.1:5000/denv/opsbox:bookworm",
    cmd: ["sleep", "infinity"],
    user: "1000:1000",
    volumes: ["/home/ubuntu"],
  });
  assert.equal(made.status, 201, JSON.stringify(made.data));
  box = made.data.id;
  // What root owns and the agent must not reach through root's hands.
  await sh("echo canary > /etc/denv-canary && mkdir -p /etc/denv-dir", "root");
  // The agent's plant.
  await sh("ln -s /etc /home/ubuntu/d && mkdir -p /home/ubuntu/real");
});

after(async () => {
  if (box) await lab?.api("DELETE", `/v1/envs/${box}`);
  await lab?.close();
});

test("a planted link is refused by every file operation run as root, and /etc is untouched", async () => {
  const etcBefore = await sh("ls -la /etc | md5sum; cat /etc/denv-canary", "root");
  // PUT: an entry under the link, the link as the destination, a directory entry through it.
  refusedAsLink(
    await lab.api("PUT", `/v1/envs/${box}/files?${q("/home/ubuntu")}`, await tarOf([{ name: "d/x" }])),
    "/home/ubuntu/d",
  );
  refusedAsLink(
    await lab.api("PUT", `/v1/envs/${box}/files?${q("/home/ubuntu/d")}`, await tarOf([{ name: "x" }])),
    "/home/ubuntu/d",
  );
  refusedAsLink(
    await lab.api(
      "PUT",
      `/v1/envs/${box}/files?${q("/home/ubuntu")}`,
      await tarOf([{ name: "d/sub", dir: true }]),
    ),
    "/home/ubuntu/d",
  );
  refusedAsLink(
    await lab.api(
      "PUT",
      `/v1/envs/${box}/files?${q("/home/ubuntu/d/new/deeper")}`,
      await tarOf([{ name: "x" }]),
    ),
    "/home/ubuntu/d",
  );
  // mkdir (with parents and without), stat, list, GET, rename either way, DELETE.
  refusedAsLink(
    await lab.api("POST", `/v1/envs/${box}/files/mkdir`, { path: "/home/ubuntu/d/made", user: "root" }),
    "/home/ubuntu/d",
  );
  refusedAsLink(
    await lab.api("POST", `/v1/envs/${box}/files/mkdir`, {
      path: "/home/ubuntu/d/made",
      parents: false,
      user: "root",
    }),
    "/home/ubuntu/d",
  );
  refusedAsLink(
    await lab.api("GET", `/v1/envs/${box}/files/stat?${q("/home/ubuntu/d/denv-canary")}`),
    "/home/ubuntu/d",
  );
  refusedAsLink(await lab.api("GET", `/v1/envs/${box}/files/list?${q("/home/ubuntu/d")}`), "/home/ubuntu/d");
  refusedAsLink(
    await lab.api("GET", `/v1/envs/${box}/files/list?${q("/home/ubuntu/d/denv-dir")}`),
    "/home/ubuntu/d",
  );
  refusedAsLink(
    await lab.api("GET", `/v1/envs/${box}/files?${q("/home/ubuntu/d/denv-canary")}`),
    "/home/ubuntu/d",
  );
  refusedAsLink(
    await lab.api("POST", `/v1/envs/${box}/files/rename`, {
      from: "/home/ubuntu/d/denv-canary",
      to: "/home/ubuntu/stolen",
      user: "root",
    }),
    "/home/ubuntu/d",
  );
  refusedAsLink(
    await lab.api("POST", `/v1/envs/${box}/files/rename`, {
      from: "/home/ubuntu/real",
      to: "/home/ubuntu/d/planted",
      user: "root",
    }),
    "/home/ubuntu/d",
  );
  refusedAsLink(
    await lab.api("DELETE", `/v1/envs/${box}/files?${q("/home/ubuntu/d/denv-canary")}`),
    "/home/ubuntu/d",
  );
  refusedAsLink(
    await lab.api("DELETE", `/v1/envs/${box}/files?${q("/home/ubuntu/d/denv-dir")}&recursive=true`),
    "/home/ubuntu/d",
  );
  // Nothing of /etc changed; the link itself is still a link, reported as one (not its target).
  assert.equal(await sh("ls -la /etc | md5sum; cat /etc/denv-canary", "root"), etcBefore);
  assert.equal(
    await sh("test ! -e /etc/x && test ! -e /etc/made && test ! -e /etc/new && echo none", "root"),
    "none\n",
  );
  const st = await lab.api("GET", `/v1/envs/${box}/files/stat?${q("/home/ubuntu/d")}`);
  assert.equal(st.status, 200, JSON.stringify(st.data));
  assert.equal(st.data.type, "symlink");
  assert.equal(st.data.link_target, "/etc");
  // Removing the link removes the link, never what it points to.
  assert.equal(
    (await lab.api("DELETE", `/v1/envs/${box}/files?${q("/home/ubuntu/d")}&recursive=true`)).status,
    200,
  );
  assert.equal(await sh("cat /etc/denv-canary; test -d /etc/denv-dir && echo dir", "root"), "canary\ndir\n");
  // The same operations on real directories work as root (the refusals were about the link).
  const ok = await lab.api(
    "PUT",
    `/v1/envs/${box}/files?${q("/home/ubuntu/real")}`,
    await tarOf([{ name: "sub/x", body: "fine" }]),
  );
  assert.equal(ok.status, 200, JSON.stringify(ok.data));
  assert.equal(
    await sh("cat /home/ubuntu/real/sub/x; echo; stat -c %U /home/ubuntu/real/sub/x"),
    "fine\nroot\n",
  );
  // A name right under / is walked from / too; a missing component is said of the whole path.
  const etc = await lab.api("GET", `/v1/envs/${box}/files/stat?${q("/etc")}`);
  assert.equal(etc.status, 200, JSON.stringify(etc.data));
  assert.equal(etc.data.type, "directory");
  const missing = await lab.api("GET", `/v1/envs/${box}/files?${q("/home/ubuntu/nowhere/deeper/x")}`);
  assert.equal(missing.status, 404, JSON.stringify(missing.data));
  assert.equal(missing.data.error.code, "not_found");
  assert.match(missing.data.error.message, /\/home\/ubuntu\/nowhere\/deeper\/x/);
});

test("a link swapped in while root writes is never followed: nothing lands in /etc", async () => {
  // A sandbox whose own program (uid 1000) flips /home/ubuntu/w between a directory and a link to
  // /etc as fast as it can (a directory is moved away, never emptied: root's writes may be in it),
  // counting its rounds, until told to stop. ($$: a sandbox's command is interpolated as compose's.)
  const made = await lab.api("POST", "/v1/sandboxes", {
    image: "127.0.0.1:5000/denv/opsbox:bookworm",
    cmd: [
      "sh",
      "-c",
      "cd /home/ubuntu && n=0; while [ ! -e stop ]; do n=$((n+1)); rm -f w; mkdir w; mv w o$$n; rmdir o$$n; ln -s /etc w; [ $((n % 50)) = 0 ] && echo $$n > rounds; done; exec sleep infinity",
    ],
    user: "1000:1000",
    volumes: ["/home/ubuntu"],
  });
  assert.equal(made.status, 201, JSON.stringify(made.data));
  const racer = made.data.id as string;
  const inRacer = async (command: string, user = "1000:1000") => {
    const r = await lab.api("POST", `/v1/envs/${racer}/exec`, { command: ["sh", "-c", command], user });
    assert.equal(r.data.exit_code, 0, JSON.stringify(r.data));
    return r.data.stdout as string;
  };
  // Started: the loop has gone round (no fixed budget: its count is the progress watched).
  await waitFor("the racer's loop to go round", async () =>
    /^\d+$/.test((await inRacer("cat /home/ubuntu/rounds 2>/dev/null || true")).trim()),
  );
  const outcomes = new Map<string, number>();
  const count = (what: string) => outcomes.set(what, (outcomes.get(what) ?? 0) + 1);
  // Until the race has been met 20 times (each a write the link would have taken to /etc).
  let met = 0;
  for (let i = 0; met < 20; i++) {
    assert.ok(i < 2000, `the race was met ${met} times in ${i} rounds of writes`);
    const body = await tarOf([{ name: `w/raced-${i}`, body: "root's" }, { name: `w/dir-${i}/f` }]);
    const r = await lab.api("PUT", `/v1/envs/${racer}/files?${q("/home/ubuntu")}`, body);
    count(r.status === 200 ? "written" : `${r.status} ${r.data.error?.code}`);
    const m = await lab.api("POST", `/v1/envs/${racer}/files/mkdir`, {
      path: `/home/ubuntu/w/m-${i}/n`,
      user: "root",
    });
    count(m.status === 200 ? "mkdir made" : `mkdir ${m.status} ${m.data.error?.code}`);
    met = (outcomes.get("400 invalid_path") ?? 0) + (outcomes.get("mkdir 400 invalid_path") ?? 0);
  }
  const rounds = (await inRacer("touch /home/ubuntu/stop; cat /home/ubuntu/rounds")).trim();
  process.stdout.write(
    `# outcomes under the swapping link (${rounds}+ rounds of it): ${JSON.stringify(Object.fromEntries(outcomes))}\n`,
  );
  // Every refusal was one of the walk's own answers, and /etc holds none of it.
  for (const k of outcomes.keys())
    assert.match(
      k,
      /^(written|mkdir made|(mkdir )?(400 invalid_path|404 not_found|409 not_a_directory|409 is_directory|403 permission_denied))$/,
    );
  assert.equal(await inRacer("ls /etc | grep -cE '^(raced|dir|m)-' || true", "root"), "0\n");
  await lab.api("DELETE", `/v1/envs/${racer}`);
});
