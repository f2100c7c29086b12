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
import { type ApiAnswer, type Lab, openLab } from "./security-lab.ts";

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
});

test("a link swapped in while root writes is never followed: nothing lands in /etc", async () => {
  // The agent flips /home/ubuntu/w between a directory and a link to /etc as fast as it can (a
  // directory is moved away, never emptied: root's writes may be in it), until told to stop.
  await sh(
    "cd /home/ubuntu && (setsid sh -c 'n=0; while [ ! -e stop ]; do n=$((n+1)); rm -f w; mkdir w; mv w o$n; rmdir o$n; ln -s /etc w; done' >/dev/null 2>&1 &)",
  );
  // Started: the loop has gone round (its directories come and go as o1, o2, …).
  for (
    let i = 0;
    i < 200 && !/^yes$/.test((await sh("test -e /home/ubuntu/w && echo yes || echo no")).trim());
    i++
  )
    await new Promise((r) => setTimeout(r, 50));
  const outcomes = new Map<string, number>();
  const count = (what: string) => outcomes.set(what, (outcomes.get(what) ?? 0) + 1);
  // Until the race has been met 20 times (each a write the link would have taken to /etc).
  let met = 0;
  for (let i = 0; i < 3000 && met < 20; i++) {
    const body = await tarOf([{ name: `w/raced-${i}`, body: "root's" }, { name: `w/dir-${i}/f` }]);
    const r = await lab.api("PUT", `/v1/envs/${box}/files?${q("/home/ubuntu")}`, body);
    count(r.status === 200 ? "written" : `${r.status} ${r.data.error?.code}`);
    const made = await lab.api("POST", `/v1/envs/${box}/files/mkdir`, {
      path: `/home/ubuntu/w/m-${i}/n`,
      user: "root",
    });
    count(made.status === 200 ? "mkdir made" : `mkdir ${made.status} ${made.data.error?.code}`);
    met = (outcomes.get("400 invalid_path") ?? 0) + (outcomes.get("mkdir 400 invalid_path") ?? 0);
  }
  await sh("touch /home/ubuntu/stop");
  process.stdout.write(
    `# outcomes under the swapping link: ${JSON.stringify(Object.fromEntries(outcomes))}\n`,
  );
  // Every refusal was one of the walk's own answers, and /etc holds none of it.
  for (const k of outcomes.keys())
    assert.match(
      k,
      /^(written|mkdir made|(mkdir )?(400 invalid_path|404 not_found|409 not_a_directory|409 is_directory|403 permission_denied))$/,
    );
  assert.ok(met >= 20, `the race was met ${met} times`);
  assert.equal(await sh("ls /etc | grep -cE '^(raced|dir|m)-' || true", "root"), "0\n");
});
