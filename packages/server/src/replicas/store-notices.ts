/**
 * Word between replicas through the database they share: PostgreSQL's LISTEN/NOTIFY. A replica
 * says a host connected to it (the others look where hosts are at once instead of at their next
 * read) and that a deployment changed (an event stream open on another replica is woken at once
 * instead of at its next poll). Only ids travel; the rows stay the truth, and everything that
 * listens also reads on a timer, so a notice lost while the listening connection was down costs a
 * second, not a result. On SQLite there is one replica: notices go nowhere.
 */
import type pg from "pg";
import { serverLog } from "../server-log.ts";

export type NoticeChannel = "denv_hosts" | "denv_deployments";

export interface StoreNotices {
  notify(channel: NoticeChannel, id: string): void;
  on(channel: NoticeChannel, listener: (id: string) => void): void;
  close(): Promise<void>;
}

const RECONNECT_MS = 1000;

export function openStoreNotices(databaseUrl: string | undefined): StoreNotices {
  if (!databaseUrl) return { notify() {}, on() {}, close: async () => {} };
  const listeners = new Map<string, ((id: string) => void)[]>();
  let client: pg.Client | null = null;
  let closed = false;
  let retry: NodeJS.Timeout | null = null;
  // pg is loaded by servers on PostgreSQL only.
  const pgLoaded = import("pg");
  const connect = async () => {
    const { Client } = (await pgLoaded).default;
    if (closed) return;
    const c = new Client({ connectionString: databaseUrl });
    c.on("notification", (n) => {
      // Ids only (ours are short tokens): anything else on the channel is not ours to act on.
      if (!n.payload || !/^[A-Za-z0-9_-]{1,100}$/.test(n.payload)) return;
      for (const l of listeners.get(n.channel) ?? []) l(n.payload);
    });
    const again = (err: Error) => {
      if (client === c) client = null;
      c.removeAllListeners("error");
      c.on("error", () => {});
      void c.end().catch(() => {});
      if (closed || retry) return;
      serverLog().warn({ error: err.message }, "the store's notices connection dropped; reconnecting");
      retry = setTimeout(() => {
        retry = null;
        void connect();
      }, RECONNECT_MS);
      retry.unref();
    };
    c.on("error", again);
    c.connect()
      .then(async () => {
        for (const ch of listeners.keys()) await c.query(`LISTEN ${ch}`);
        client = c;
      })
      .catch(again);
  };
  void connect();
  return {
    notify(channel, id) {
      void client?.query("SELECT pg_notify($1, $2)", [channel, id]).catch(() => {});
    },
    on(channel, listener) {
      const first = !listeners.has(channel);
      listeners.set(channel, [...(listeners.get(channel) ?? []), listener]);
      if (first) void client?.query(`LISTEN ${channel}`).catch(() => {});
    },
    async close() {
      closed = true;
      if (retry) clearTimeout(retry);
      await client?.end().catch(() => {});
    },
  };
}
