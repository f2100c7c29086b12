/**
 * A test's own internet: a network namespace joined to the host by a veth pair on a /30 of
 * 198.18.0.0/15 (the range set aside for benchmarks: never anyone's real address), holding
 * upstream servers (internet-upstream.ts) with a certificate from the test's own CA. The host
 * reaches it by its route; containers of a stack never do, except through denv's egress proxy.
 * Nothing leaves this machine.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { waitFor } from "./wait-for.ts";

export interface TestInternet {
  /** The upstream servers' address. */
  address: string;
  /** The test CA's certificate (PEM), which signed the upstream's for `names`. */
  caPem: string;
  caFile: string;
  /** The names the upstream's certificate holds. */
  names: string[];
  close(): Promise<void>;
}

/** Names of the namespaces this harness makes (host-leftovers.ts removes those a killed run left). */
export const INTERNET_PREFIX = "denv-inet-";

const run = (cmd: string, args: string[]) =>
  execFileSync(cmd, args, { stdio: ["ignore", "pipe", "pipe"] }).toString();

export async function startTestInternet(names: string[]): Promise<TestInternet> {
  const tag = randomBytes(3).toString("hex");
  const ns = `${INTERNET_PREFIX}${tag}`;
  const used = run("ip", ["-4", "-o", "addr"]);
  let third = 0;
  let fourth = 0;
  for (let tries = 0; ; tries++) {
    third = 2 + ((randomBytes(1)[0] as number) % 250);
    fourth = 4 * ((randomBytes(1)[0] as number) % 64);
    if (!used.includes(`198.19.${third}.${fourth + 1}/`)) break;
    if (tries > 50) throw new Error("no free /30 for a test internet");
  }
  const host = `198.19.${third}.${fourth + 1}`;
  const address = `198.19.${third}.${fourth + 2}`;
  const dir = mkdtempSync(join(tmpdir(), "denv-inet-"));
  let server: ChildProcess | null = null;
  const close = async () => {
    server?.kill("SIGKILL");
    try {
      run("ip", ["netns", "del", ns]);
    } catch {}
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    run("ip", ["netns", "add", ns]);
    run("ip", ["link", "add", `dvi${tag}h`, "type", "veth", "peer", "name", `dvi${tag}n`]);
    run("ip", ["link", "set", `dvi${tag}n`, "netns", ns]);
    run("ip", ["addr", "add", `${host}/30`, "dev", `dvi${tag}h`]);
    run("ip", ["link", "set", `dvi${tag}h`, "up"]);
    run("ip", ["-n", ns, "addr", "add", `${address}/30`, "dev", `dvi${tag}n`]);
    run("ip", ["-n", ns, "link", "set", `dvi${tag}n`, "up"]);
    run("ip", ["-n", ns, "link", "set", "lo", "up"]);
    const pem = (n: string) => join(dir, n);
    run("openssl", [
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-keyout",
      pem("ca.key"),
      "-out",
      pem("ca.pem"),
      "-days",
      "1",
      "-subj",
      "/CN=denv test internet CA",
    ]);
    run("openssl", [
      "req",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-keyout",
      pem("server.key"),
      "-out",
      pem("server.csr"),
      "-subj",
      `/CN=${names[0]}`,
    ]);
    const san = join(dir, "san.cnf");
    execFileSync("sh", [
      "-c",
      `printf 'subjectAltName=%s\\n' "$1" > "$2"`,
      "sh",
      names.map((n) => `DNS:${n}`).join(","),
      san,
    ]);
    run("openssl", [
      "x509",
      "-req",
      "-in",
      pem("server.csr"),
      "-CA",
      pem("ca.pem"),
      "-CAkey",
      pem("ca.key"),
      "-CAcreateserial",
      "-out",
      pem("server.pem"),
      "-days",
      "1",
      "-extfile",
      san,
    ]);
    const upstream = join(import.meta.dirname, "internet-upstream.ts");
    const child = spawn(
      "ip",
      ["netns", "exec", ns, process.execPath, upstream, pem("server.key"), pem("server.pem")],
      {
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    server = child;
    let out = "";
    child.stdout?.on("data", (c: Buffer) => {
      out += c.toString();
    });
    child.stderr?.on("data", (c: Buffer) => {
      out += c.toString();
    });
    await waitFor("the test internet's servers to listen", () => {
      if (child.exitCode !== null) throw new Error(`the upstream servers exited: ${out}`);
      return out.includes("ready");
    });
    const caPem = readFileSync(pem("ca.pem"), "utf8");
    return { address, caPem, caFile: pem("ca.pem"), names, close };
  } catch (err) {
    await close();
    throw err;
  }
}
