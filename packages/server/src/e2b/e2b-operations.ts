/**
 * Every operation of the E2B gateway and what it needs of its caller's role (api/access-rules.ts):
 * the control plane's routes (a key in X-API-Key) and envd's (a sandbox's access token, made for
 * one key and acting as it). The routes are mounted from these tables only (a route missing here
 * cannot be mounted), and the route matrix walks them with a read-only, a member and another
 * team's key.
 */
import type { Need } from "../people/access-rules.ts";

/** The control plane's routes, `METHOD /path` as Hono spells them. */
export const E2B_CONTROL_OPERATIONS = {
  "POST /v2/sandboxes": "change",
  "POST /sandboxes": "change",
  "GET /v2/sandboxes": "read",
  "GET /sandboxes": "read",
  "GET /sandboxes/:id": "read",
  "DELETE /sandboxes/:id": "change",
  "POST /sandboxes/:id/timeout": "change",
  "POST /sandboxes/:id/pause": "change",
  /** Its egress policy replaced (sandbox-network.ts). */
  "PUT /sandboxes/:id/network": "change",
  /**
   * Connect hands back the sandbox (with the caller's own token); a read-only caller's connect
   * neither resumes a paused sandbox nor lengthens a running one's timeout (both need change).
   */
  "POST /v2/sandboxes/:id/connect": "read",
  "POST /sandboxes/:id/connect": "read",
  "POST /sandboxes/:id/resume": "change",
  "POST /sandboxes/:id/snapshots": "change",
  "GET /snapshots": "read",
  "POST /sandboxes/:id/fork": "change",
} as const satisfies Record<string, Need>;

export type E2bControlOperation = keyof typeof E2B_CONTROL_OPERATIONS;

/** envd's routes: Connect procedures (all POST) and /files. /health answers anyone (it says nothing). */
export const ENVD_OPERATIONS = {
  "POST /process.Process/Start": "change",
  "POST /process.Process/Connect": "read",
  "POST /process.Process/List": "read",
  "POST /process.Process/SendInput": "change",
  "POST /process.Process/CloseStdin": "change",
  "POST /process.Process/SendSignal": "change",
  "POST /filesystem.Filesystem/Stat": "read",
  "POST /filesystem.Filesystem/ListDir": "read",
  "POST /filesystem.Filesystem/WatchDir": "read",
  "POST /filesystem.Filesystem/MakeDir": "change",
  "POST /filesystem.Filesystem/Move": "change",
  "POST /filesystem.Filesystem/Remove": "change",
  "GET /files": "read",
  "POST /files": "change",
} as const satisfies Record<string, Need>;

export type EnvdOperation = keyof typeof ENVD_OPERATIONS;

/** The path of an operation (`METHOD /path`). */
export const pathOf = (op: string) => op.slice(op.indexOf(" ") + 1);
