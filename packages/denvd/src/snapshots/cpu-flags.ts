/**
 * The CPU a live version's processes were taken on. CRIU restores a process's registers and its
 * memory as they were, code paths included that were chosen once at start for this CPU (glibc
 * picks its AVX2 or AVX-512 string functions when a program loads): restored on a CPU that lacks a
 * flag the first one had, such a process would die on its next such instruction. So a version
 * records its host's flags, and a host that lacks one of them never restores its processes.
 */
import { readFile } from "node:fs/promises";
import { DenvError } from "@denv/protocol";

/** This host's CPU flags, as the kernel lists them for its first processor. */
export async function hostCpuFlags(cpuinfo?: string): Promise<string[]> {
  const text = cpuinfo ?? (await readFile("/proc/cpuinfo", "utf8").catch(() => ""));
  // x86 says "flags", arm64 "Features".
  const line = /^(?:flags|Features)\s*:\s*(.*)$/m.exec(text)?.[1] ?? "";
  return [...new Set(line.split(/\s+/).filter((f) => /^[a-z0-9_]{1,64}$/.test(f)))].sort();
}

/** The flags the processes were taken with that this CPU lacks (none: it can restore them). */
export function missingCpuFlags(taken: readonly string[] | undefined, here: readonly string[]): string[] {
  const has = new Set(here);
  return (taken ?? []).filter((f) => !has.has(f));
}

/** Refuses a restore on a CPU that lacks a flag the processes were taken with, naming them. */
export async function assertCpuCanRestore(
  versionId: string,
  cpuFlags: readonly string[] | undefined,
): Promise<void> {
  const missing = missingCpuFlags(cpuFlags, await hostCpuFlags());
  if (missing.length)
    throw new DenvError(
      "not_supported",
      `this host's CPU lacks ${missing.slice(0, 8).join(", ")}${missing.length > 8 ? ` and ${missing.length - 8} more` : ""}, which version ${versionId}'s processes were taken with: a restored process could run instructions this CPU does not have; fork it --cold, or on a host whose CPU has them`,
    );
}
