/**
 * A stack's file secrets (compose's `secrets:` with `file:`): each service's secret written by
 * denvd into the stack's own directory under its state directory (root-only, 0700), owned and
 * moded as the file says, and bind-mounted read-only at its target, as Compose mounts a file
 * secret. The content comes from the stack's spec (sealed on the control plane), so every fork,
 * rollback and replay of a version gets the same files; teardown removes them.
 */
import { chmod, chown, mkdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { ResolvedSpec } from "@denv/protocol";

export function secretsDirOf(stateDir: string, stackId: string): string {
  return join(stateDir, "secrets", stackId);
}

/** Host path → target, per service: what each container mounts. */
export type SecretMounts = Record<string, { source: string; target: string }[]>;

export async function writeStackSecrets(
  stateDir: string,
  stackId: string,
  spec: ResolvedSpec,
): Promise<SecretMounts> {
  const out: SecretMounts = {};
  const dir = secretsDirOf(stateDir, stackId);
  for (const [svc, s] of Object.entries(spec.services)) {
    if (!s.secrets?.length) continue;
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await chmod(dir, 0o700);
    out[svc] = [];
    for (const [i, sec] of s.secrets.entries()) {
      const content = spec.secret_files?.[sec.name];
      if (!content) throw new Error(`secret ${sec.name} of ${svc} has no content in the spec`);
      // Names of our own making: nothing from the file names a path on the host.
      const source = join(dir, `${svc}-${i}`);
      await rm(source, { force: true });
      await writeFile(source, Buffer.from(content.content_b64, "base64"), { mode: 0o600, flag: "wx" });
      await chown(source, sec.uid, sec.gid);
      await chmod(source, sec.mode);
      out[svc].push({ source, target: sec.target });
    }
  }
  return out;
}

export async function removeStackSecrets(stateDir: string, stackId: string): Promise<void> {
  await rm(secretsDirOf(stateDir, stackId), { recursive: true, force: true });
}
