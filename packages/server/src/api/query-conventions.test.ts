/**
 * One convention per kind of query parameter across the routes: a yes-or-no parameter (one whose
 * description says what `true` or `false` does) is `queryFlag`, the enum of the two words, on
 * every route, so `?wait=yes` is refused by name everywhere rather than read as false on some.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { z } from "zod";
import { API_ROUTES } from "./api-routes.ts";

test("every yes-or-no query parameter of every route takes exactly true or false", () => {
  const flags: string[] = [];
  const wrong: string[] = [];
  for (const r of API_ROUTES) {
    if (!(r.query instanceof z.ZodObject)) continue;
    for (const [name, field] of Object.entries(r.query.shape as Record<string, z.ZodType>)) {
      if (!/^(true|false):/.test(field.description ?? "")) continue;
      flags.push(`${r.method} ${r.path} ?${name}`);
      const inner = field instanceof z.ZodOptional ? field.unwrap() : field;
      const values = inner instanceof z.ZodEnum ? [...inner.options].sort() : null;
      if (JSON.stringify(values) !== JSON.stringify(["false", "true"]))
        wrong.push(`${r.method} ${r.path} ?${name}`);
    }
  }
  // The routes that have one: deploy, promote, replays, exec's stream form, files' remove, MCP, env kinds.
  assert.ok(flags.length >= 8, flags.join("\n"));
  assert.deepEqual(wrong, []);
});
