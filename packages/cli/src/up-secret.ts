/** The local host's secret for `denv up`: joined once through a join token, then reused. */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { RunningServer } from "@denv/server";

export async function localHostSecret(server: RunningServer, stateDir: string): Promise<string> {
  const path = join(stateDir, "host.json");
  if (existsSync(path)) {
    const saved = JSON.parse(readFileSync(path, "utf8")) as { host_id: string; secret: string };
    const known = await server.store
      .selectFrom("hosts")
      .select("id")
      .where("id", "=", saved.host_id)
      .executeTakeFirst();
    if (known) return saved.secret;
  }
  const team = await server.store
    .selectFrom("teams")
    .select("id")
    .orderBy("created_at")
    .executeTakeFirstOrThrow();
  const { joinLocalHost } = await import("@denv/server");
  const joined = await joinLocalHost(server, team.id, "local");
  mkdirSync(stateDir, { recursive: true });
  writeFileSync(path, `${JSON.stringify({ server: server.url, ...joined, storage: "btrfs" }, null, 2)}\n`, {
    mode: 0o600,
  });
  return joined.secret;
}
