import { readFile } from "node:fs/promises";

/** The IPv4 networks this host routes to directly (from /proc/net/route), default route excluded. */
export async function hostRoutes(): Promise<string[]> {
  const text = await readFile("/proc/net/route", "utf8").catch(() => "");
  const out: string[] = [];
  for (const line of text.split("\n").slice(1)) {
    const [, dest, , , , , , mask] = line.trim().split(/\s+/);
    if (!dest || !mask || dest === "00000000") continue;
    // Little-endian hex, as the kernel prints it.
    const ip = (h: string) => [0, 2, 4, 6].map((i) => Number.parseInt(h.slice(i, i + 2), 16)).reverse();
    const bits = ip(mask).reduce((n, o) => n + o.toString(2).replace(/0/g, "").length, 0);
    out.push(`${ip(dest).join(".")}/${bits}`);
  }
  return out;
}
