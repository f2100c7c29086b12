/**
 * A network namespace's TCP connections and local addresses as /proc shows them (net/tcp,
 * net/tcp6, net/fib_trie of any process in it), for a live snapshot's check that no process holds
 * a connection to outside the stack: a fork restores the connection, but nothing there answers
 * for a peer that is not one of the stack's own services.
 */

/** One TCP socket with a peer: its inode (the `socket:[N]` a process's descriptor links to) and peer. */
export interface TcpPeer {
  inode: string;
  /** The peer, "a.b.c.d:port" (IPv4, IPv4-mapped IPv6 shown as IPv4) or "[hex]:port" (IPv6). */
  peer: string;
  /** The peer's address alone, in the same form as fibLocalAddresses gives (IPv4). */
  address: string;
}

/** The kernel's little-endian hex IPv4 ("0100007F") → "127.0.0.1". */
function ipv4(hex: string): string {
  return [6, 4, 2, 0].map((i) => Number.parseInt(hex.slice(i, i + 2), 16)).join(".");
}

/** An IPv6 address in /proc's form (four little-endian 32-bit words) → an IPv4 one when mapped. */
function ipv6(hex: string): string {
  const words = [0, 8, 16, 24].map((i) => hex.slice(i, i + 8));
  if (words[0] === "00000000" && words[1] === "00000000" && words[2] === "FFFF0000")
    return ipv4(words[3] as string);
  return `[${hex.toLowerCase()}]`;
}

/**
 * Every socket with a peer (anything but LISTEN and CLOSE) in net/tcp or net/tcp6's text. Lines not
 * of that shape are skipped.
 */
export function tcpPeers(text: string): TcpPeer[] {
  const out: TcpPeer[] = [];
  for (const line of text.split("\n")) {
    const f = line.trim().split(/\s+/);
    const rem = f[2];
    const st = f[3];
    const inode = f[9];
    if (!rem || !st || !inode || !/^\d+:$/.test(f[0] ?? "")) continue;
    // 0A: LISTEN, 07: CLOSE (a socket made, never connected).
    if (st === "0A" || st === "07" || inode === "0") continue;
    const m = /^([0-9A-Fa-f]{8}|[0-9A-Fa-f]{32}):([0-9A-Fa-f]{4})$/.exec(rem);
    if (!m) continue;
    const address = (m[1] as string).length === 8 ? ipv4(m[1] as string) : ipv6(m[1] as string);
    out.push({ inode, peer: `${address}:${Number.parseInt(m[2] as string, 16)}`, address });
  }
  return out;
}

/** The namespace's own IPv4 addresses (fib_trie's "/32 host LOCAL" entries). */
export function fibLocalAddresses(text: string): string[] {
  const out = new Set<string>();
  let last: string | null = null;
  for (const line of text.split("\n")) {
    const ip = /\|--\s+(\d{1,3}(?:\.\d{1,3}){3})\s*$/.exec(line)?.[1];
    if (ip) last = ip;
    else if (last && /\/32 host LOCAL/.test(line)) out.add(last);
  }
  return [...out];
}

/** Whether an address is this host's loopback (a connection inside one container). */
export function isLoopback(address: string): boolean {
  return address.startsWith("127.") || address === `[${"0".repeat(24)}01000000]`;
}
