import assert from "node:assert/strict";
import { test } from "node:test";
import { API_ROUTES } from "./api-routes.ts";

test("every route has its own client method name, group.verb in camelCase", () => {
  const seen = new Map<string, string>();
  for (const r of API_ROUTES) {
    const where = `${r.method.toUpperCase()} ${r.path}`;
    assert.match(r.name, /^[a-z][a-zA-Z]*\.[a-z][a-zA-Z]*$/, `${where}: ${r.name} is not group.verb`);
    assert.ok(!seen.has(r.name), `${where} and ${seen.get(r.name)} are both ${r.name}`);
    seen.set(r.name, where);
  }
});

test("a group's routes share its path's resource, so a method is found where its path is", () => {
  // The group is the path's first segment after /v1 (files, meta and the resource's own verbs
  // excepted): envs.* are /v1/envs/..., versions.* /v1/versions/..., so the clients read as the API.
  const exceptions = new Set(["files", "meta"]);
  for (const r of API_ROUTES) {
    const group = r.name.split(".")[0] as string;
    if (exceptions.has(group)) continue;
    assert.equal(r.path.split("/")[2], group, `${r.name} is ${r.method.toUpperCase()} ${r.path}`);
  }
});
