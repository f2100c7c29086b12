/**
 * MCP over Streamable HTTP, one session per client: each session is its own McpServer and
 * transport, bound to the key that opened it. Sessions (not a stateless server per request) so a
 * `notifications/cancelled`, which arrives as a request of its own, reaches the tool call it
 * cancels, and a tool call's progress streams back on its own response.
 *
 * A session id is a capability only together with its key: a request that names another key's
 * session is answered as if the session did not exist. Idle sessions close after `idleMs`, and a
 * key holds at most `maxPerOwner` (the least recently used one closes), so clients that never say
 * goodbye cannot pile sessions up.
 */
import { randomUUID } from "node:crypto";
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { WebStandardStreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js";

export interface McpSessionsOptions {
  /** A fresh server for a new session, acting with this caller's key. */
  makeServer: (key: string, mode: { readOnly: boolean }) => McpServer;
  idleMs?: number;
  maxPerOwner?: number;
}

interface Session {
  owner: string;
  server: McpServer;
  transport: WebStandardStreamableHTTPServerTransport;
  lastUsedMs: number;
  inFlight: number;
}

function rpcError(status: number, code: number, message: string): Response {
  return new Response(JSON.stringify({ jsonrpc: "2.0", error: { code, message }, id: null }), {
    status,
    headers: { "content-type": "application/json" },
  });
}

export class McpSessions {
  private readonly sessions = new Map<string, Session>();
  private readonly makeServer: (key: string, mode: { readOnly: boolean }) => McpServer;
  private readonly idleMs: number;
  private readonly maxPerOwner: number;
  private readonly sweeper: NodeJS.Timeout;

  constructor(options: McpSessionsOptions) {
    this.makeServer = options.makeServer;
    this.idleMs = options.idleMs ?? 30 * 60_000;
    this.maxPerOwner = options.maxPerOwner ?? 16;
    this.sweeper = setInterval(() => this.sweep(), Math.min(60_000, this.idleMs)).unref();
  }

  get size(): number {
    return this.sessions.size;
  }

  /**
   * One HTTP request of the MCP endpoint: `owner` identifies the caller's key (never the key
   * itself), `key` is what the session's tools call /v1 with. `readOnly` is chosen when the
   * session starts (its initialize request) and holds for its life.
   */
  async handle(req: Request, owner: string, key: string, mode = { readOnly: false }): Promise<Response> {
    const id = req.headers.get("mcp-session-id");
    if (id) {
      const s = this.sessions.get(id);
      // Another key's session answers as a missing one: its existence is not told.
      if (!s || s.owner !== owner) return rpcError(404, -32001, "Session not found");
      s.lastUsedMs = Date.now();
      s.inFlight++;
      try {
        return await s.transport.handleRequest(req);
      } finally {
        s.inFlight--;
        s.lastUsedMs = Date.now();
      }
    }
    if (req.method !== "POST")
      return rpcError(400, -32000, "Bad Request: no Mcp-Session-Id; start with an initialize request (POST)");
    const server = this.makeServer(key, mode);
    const session: Session = {
      owner,
      server,
      transport: new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        onsessioninitialized: (sid) => {
          this.evictBeyondLimit(owner);
          this.sessions.set(sid, session);
        },
        onsessionclosed: (sid) => {
          this.close(sid);
        },
      }),
      lastUsedMs: Date.now(),
      inFlight: 0,
    };
    await server.connect(session.transport);
    const res = await session.transport.handleRequest(req);
    // Anything but an initialize made no session: its server is not kept.
    if (!session.transport.sessionId) await server.close().catch(() => {});
    return res;
  }

  private evictBeyondLimit(owner: string): void {
    const mine = [...this.sessions].filter(([, s]) => s.owner === owner);
    if (mine.length < this.maxPerOwner) return;
    mine.sort(([, a], [, b]) => a.lastUsedMs - b.lastUsedMs);
    for (const [sid] of mine.slice(0, mine.length - this.maxPerOwner + 1)) this.close(sid);
  }

  private close(sid: string): void {
    const s = this.sessions.get(sid);
    if (!s) return;
    this.sessions.delete(sid);
    void s.server.close().catch(() => {});
  }

  private sweep(): void {
    const now = Date.now();
    for (const [sid, s] of this.sessions)
      if (s.inFlight === 0 && now - s.lastUsedMs > this.idleMs) this.close(sid);
  }

  /** Ends every session (the server is stopping). */
  async closeAll(): Promise<void> {
    clearInterval(this.sweeper);
    for (const sid of [...this.sessions.keys()]) this.close(sid);
  }
}
