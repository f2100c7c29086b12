/**
 * The addresses a checkpointed container had, for its restore elsewhere (denv-addrs in the
 * images, read by CRIU's action script scripts/ensure-criu.sh writes): a restored TCP connection
 * binds its old local address and goes on talking to its peer's old address, so a fork's
 * container carries its parent's addresses beside its own, on its own network only.
 */

/** The file's name in a checkpoint's images. */
export const ADDRESS_LIST = "denv-addrs";

/** An interface name as the kernel allows it (15 characters), of the kind the engine makes. */
const DEV = /^[a-z][a-z0-9]{0,14}$/;

/** `a.b.c.d/len` → its network in the same form; null for what is not one. */
export function subnetOf(cidr: string): string | null {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(cidr);
  if (!m) return null;
  const octets = m.slice(1, 5).map(Number);
  const len = Number(m[5]);
  if (octets.some((o) => o > 255) || len > 32) return null;
  const ip = octets.reduce((n, o) => n * 256 + o, 0);
  // By arithmetic: JavaScript's bitwise operators work on signed 32-bit numbers.
  const net = ip - (ip % 2 ** (32 - len));
  return `${[24, 16, 8, 0].map((s) => Math.floor(net / 2 ** s) % 256).join(".")}/${len}`;
}

/** Whether `addr` (a.b.c.d) lies in `net` (a.b.c.d/len, a network as subnetOf gives it). */
function within(addr: string, net: string): boolean {
  const len = net.split("/")[1];
  return subnetOf(`${addr}/${len}`) === net;
}

/**
 * The list's lines ("eth0 10.0.3.4 10.0.3.0/24": an address and the on-link subnet it reaches
 * its peers in) from `ip -o -4 addr show scope global` and `ip -4 route show scope link`. An
 * address a restore added (a /32 beside the container's own) keeps the route that was added with
 * it, so a fork's fork, or a restored container's pause, keeps reaching the same peers. Loopback
 * and anything not of that shape are left out.
 */
export function addressLines(addrOutput: string, routeOutput = ""): string {
  const routes: { net: string; dev: string }[] = [];
  for (const line of routeOutput.split("\n")) {
    const m = /^(\S+)\s+dev\s+(\S+)/.exec(line);
    const net = m && subnetOf(m[1] as string);
    if (m && net === m[1]) routes.push({ net, dev: m[2] as string });
  }
  const out: string[] = [];
  for (const line of addrOutput.split("\n")) {
    const m = /^\d+:\s+(\S+)\s+inet\s+(\S+)/.exec(line);
    if (!m) continue;
    const dev = (m[1] as string).replace(/@.*$/, "");
    const cidr = m[2] as string;
    const own = subnetOf(cidr);
    if (!DEV.test(dev) || dev === "lo" || !own) continue;
    const addr = cidr.split("/")[0] as string;
    // The widest on-link route of its interface that holds it: its subnet, or the one a restore added.
    const reach = routes
      .filter((r) => r.dev === dev && within(addr, r.net))
      .sort((a, b) => Number(a.net.split("/")[1]) - Number(b.net.split("/")[1]))[0];
    out.push(`${dev} ${addr} ${reach?.net ?? own}`);
  }
  return out.length ? `${out.join("\n")}\n` : "";
}

/**
 * The subnets a checkpoint's list names (each line's third field): a fork restoring it takes its
 * own network elsewhere, or the fork's containers could be given, as their own, addresses its
 * restored processes add back (two containers answering for one address).
 */
export function listedSubnets(list: string): string[] {
  const out = new Set<string>();
  for (const line of list.split("\n")) {
    const net = line.trim().split(/\s+/)[2];
    const own = net && subnetOf(net);
    if (own && own === net) out.add(own);
  }
  return [...out];
}
