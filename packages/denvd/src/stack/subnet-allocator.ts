/**
 * Subnets for environment networks. The engine's default address pools hold about 31 bridge
 * networks (/16s and /20s), and denv makes one network per environment, so a host would stop at
 * ~30 environments. denvd carves /24s from a pool itself (default 172.16.0.0/12, less whatever
 * the engine or the host already uses), which allows about 4,000.
 */

export function parseCidr(cidr: string): { base: number; bits: number } | null {
  const m = /^(\d+)\.(\d+)\.(\d+)\.(\d+)\/(\d+)$/.exec(cidr.trim());
  if (!m) return null;
  const octets = m.slice(1, 5).map(Number);
  const bits = Number(m[5]);
  if (octets.some((o) => o > 255) || bits > 32) return null;
  const ip =
    (((octets[0] as number) << 24) |
      ((octets[1] as number) << 16) |
      ((octets[2] as number) << 8) |
      (octets[3] as number)) >>>
    0;
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  return { base: (ip & mask) >>> 0, bits };
}

const toDotted = (n: number) => [24, 16, 8, 0].map((s) => (n >>> s) & 255).join(".");

/**
 * A /size subnet of `pool` that overlaps none of `used` (the first, or with `random` any of them
 * alike); null when the pool is full.
 */
export function pickSubnet(
  pool: string,
  used: string[],
  size = 24,
  random?: () => number,
): { subnet: string; gateway: string } | null {
  const p = parseCidr(pool);
  if (!p || size < p.bits) throw new Error(`bad subnet pool ${pool}`);
  const step = 2 ** (32 - size);
  const count = 2 ** (size - p.bits);
  const poolEnd = p.base + count * step; // exclusive
  // Mark the candidates each used range touches: linear in the pool and the list.
  const blocked = new Uint8Array(count);
  for (const cidr of used) {
    const u = parseCidr(cidr);
    if (!u) continue;
    const start = u.base;
    const end = u.base + 2 ** (32 - u.bits); // exclusive
    if (end <= p.base || start >= poolEnd) continue;
    const first = Math.floor((Math.max(start, p.base) - p.base) / step);
    const last = Math.floor((Math.min(end, poolEnd) - 1 - p.base) / step);
    blocked.fill(1, first, last + 1);
  }
  let i = blocked.indexOf(0);
  if (i === -1) return null;
  if (random) {
    let free = 0;
    for (const b of blocked) if (b === 0) free++;
    let k = Math.floor(random() * free);
    for (i = 0; i < count; i++) if (blocked[i] === 0 && k-- === 0) break;
  }
  const base = p.base + i * step;
  return { subnet: `${toDotted(base)}/${size}`, gateway: toDotted(base + 1) };
}
