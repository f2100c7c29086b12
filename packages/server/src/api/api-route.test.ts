import assert from "node:assert/strict";
import { test } from "node:test";
import { z } from "zod";
import { type ApiRoute, checkedAnswer, route } from "./api-route.ts";

const answering = (response: z.ZodType, responseType?: ApiRoute["responseType"]) =>
  route({
    method: "get",
    path: "/v1/things/{id}",
    name: "things.get",
    summary: "a thing",
    response,
    ...(responseType ? { responseType } : {}),
    auth: true,
    handler: () => new Response(),
  });
const json = (value: unknown, status = 200) =>
  new Response(JSON.stringify(value), { status, headers: { "content-type": "application/json" } });
const thing = z.object({ id: z.string(), size_bytes: z.number() });

test("an answer its schema takes goes as it is, body intact", async () => {
  const r = answering(thing);
  const answer = await checkedAnswer(r, json({ id: "t1", size_bytes: 3, extra: true }));
  assert.deepEqual(await answer.json(), { id: "t1", size_bytes: 3, extra: true });
});

test("an answer that says something else than its schema is the server's fault, naming the field", async () => {
  const r = answering(thing);
  await assert.rejects(
    checkedAnswer(r, json({ id: "t1", size_bytes: null })),
    /the answer of GET \/v1\/things\/\{id\} does not match its schema: size_bytes: /,
  );
  await assert.rejects(checkedAnswer(r, json({ size_bytes: 1 })), /id: /);
});

test("errors, answers that are not JSON, and routes that stream pass unchecked", async () => {
  const r = answering(thing);
  assert.equal((await checkedAnswer(r, json({ error: { code: "not_found" } }, 404))).status, 404);
  const tar = new Response("not json", { headers: { "content-type": "application/x-tar" } });
  assert.equal(await (await checkedAnswer(r, tar)).text(), "not json");
  const streamed = answering(thing, "event-stream");
  assert.equal((await checkedAnswer(streamed, json({ nothing: 1 }))).status, 200);
});
