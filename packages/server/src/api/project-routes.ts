/** Projects: what a team deploys; a local one takes uploads, a git one is fetched at each deploy. */
import { DenvError } from "@denv/protocol";
import { projectRelativePath } from "@denv/spec";
import { z } from "zod";
import { CONTEXT_DIGEST, CONTEXT_GRACE_MS } from "../build-contexts.ts";
import { referencedContexts } from "../context-expiry.ts";
import { removeUnusedBuiltImages } from "../deployments/built-images.ts";
import { removeVersion } from "../fleet/version-removal.ts";
import { checkGitUrl } from "../git-source.ts";
import { approvePreview, DEFAULT_PREVIEW_BUDGET, forkPreviewsOf } from "../github/github-webhooks.ts";
import { newId, now } from "../ids.ts";
import { deploymentById } from "../store/deployment-store.ts";
import { environmentNamed } from "../store/environment-store.ts";
import { livePreviews, previewApprovals, projectGithubDeploys } from "../store/github-store.ts";
import type { Store } from "../store/open-store.ts";
import {
  deleteProjectRecords,
  findProject,
  insertProject,
  projectEnvironments,
  projectNameTaken,
  SANDBOX_PROJECT,
  setProjectSource,
  teamProjects,
  updateProjectSettings,
} from "../store/project-store.ts";
import type { DeploymentsTable, ProjectsTable } from "../store/schema.ts";
import { resolveVersionRef, teamVersions, versionUsers } from "../store/version-store.ts";
import { type ApiRoute, JSON_LIMIT_BYTES, route } from "./api-route.ts";
import {
  buildContextSchema,
  createProjectBody,
  deployBody,
  deploymentSchema,
  previewsSchema,
  projectSchema,
  promoteBody,
  queryFlag,
  setBranchesBody,
  setPreviewsBody,
  uploadSourceBody,
} from "./api-schemas.ts";
import { serializeDeployment, serializeProject } from "./api-serializers.ts";
import { serverOrigin } from "./github-routes.ts";
import { githubEnvironmentSchema } from "./github-schemas.ts";
import { requestBody } from "./host-bytes.ts";

/** local (a directory the CLI uploads), git (any git URL), or github:OWNER/REPO. */
function sourceTypeOf(source: string): "local" | "git" | "github" {
  if (source.startsWith("github:")) return "github";
  return /^[a-z][a-z0-9+.-]*:\/\/|^[a-z][a-z0-9+.-]*::|^[\w.-]+@[\w.-]+:/i.test(source) ? "git" : "local";
}

export const projectRoutes: ApiRoute[] = [
  route({
    method: "post",
    path: "/v1/projects",
    name: "projects.create",
    summary: "Create a project",
    body: createProjectBody,
    response: projectSchema,
    status: 201,
    auth: true,
    handler: async (c, { body }) => {
      const { store, fetchPolicy } = c.var.deps;
      if (await projectNameTaken(store, c.var.teamId, body.name))
        throw new DenvError("conflict", `a project named ${body.name} already exists`);
      const sourceType = sourceTypeOf(body.source);
      // A git URL is a team's choice of what the server fetches: only https to an allowed host.
      if (sourceType === "git") checkGitUrl(body.source, fetchPolicy);
      if (body.branches && sourceType !== "github")
        throw new DenvError("invalid_argument", "branches: only a github: source deploys branches");
      // A GitHub repository is read through the team's own App's installation on it, found now.
      const github = sourceType === "github" ? await c.var.deps.github.bind(c.var.teamId, body.source) : null;
      const row: ProjectsTable = {
        id: newId("prj"),
        team_id: c.var.teamId,
        name: body.name,
        kind: body.kind,
        source_type: sourceType,
        source: body.source,
        compose_text: null,
        dotenv_text: null,
        pinned_target: body.pinned_target ?? null,
        created_at: now(),
        ...(github
          ? {
              github_app_row_id: github.github_app_row_id,
              github_installation_id: github.github_installation_id,
              github_repository_id: github.github_repository_id,
            }
          : {}),
        branches_json: body.branches ? JSON.stringify(body.branches) : null,
      };
      await insertProject(store, row);
      return c.json(serializeProject(row), 201);
    },
  }),
  route({
    method: "get",
    path: "/v1/projects",
    name: "projects.list",
    summary: "List projects",
    response: z.object({ projects: z.array(projectSchema) }),
    auth: true,
    handler: async (c) =>
      c.json({ projects: (await teamProjects(c.var.deps.store, c.var.teamId)).map(serializeProject) }),
  }),
  route({
    method: "get",
    path: "/v1/projects/{id}",
    name: "projects.get",
    summary: "A project",
    response: projectSchema,
    auth: true,
    handler: async (c) =>
      c.json(serializeProject(await findProject(c.var.deps.store, c.var.teamId, c.req.param("id") ?? ""))),
  }),
  route({
    method: "delete",
    path: "/v1/projects/{id}",
    name: "projects.delete",
    summary:
      "Delete a project: refused (409, naming them) while it has live environments or a version something uses; its versions' snapshots, its environments' records, the build contexts only it named and the images built for it go with it",
    response: z.object({
      deleted: z.string(),
      versions_deleted: z.array(z.string()),
      images_removed: z.array(z.string()),
    }),
    auth: true,
    handler: async (c) => {
      const { store, stacks } = c.var.deps;
      const p = await findProject(store, c.var.teamId, c.req.param("id") ?? "");
      if (p.name === SANDBOX_PROJECT)
        throw new DenvError(
          "invalid_argument",
          `${SANDBOX_PROJECT} holds the team's sandboxes; it is not deleted`,
        );
      const envs = await projectEnvironments(store, p);
      const live = envs.filter((e) => e.status !== "destroyed");
      if (live.length)
        throw new DenvError(
          "conflict",
          `project ${p.name} has live environments: ${live.map((e) => e.name).join(", ")}; destroy them first (denv env destroy ${p.name}/${live[0]?.name})`,
          { details: { environments: live.map((e) => e.name) } },
        );
      // Everything is checked before anything is deleted: a refusal leaves the project whole.
      const versions = await teamVersions(store, c.var.teamId, p.id);
      for (const v of versions) {
        const users = await versionUsers(store, v.id);
        if (users.length)
          throw new DenvError("conflict", `version ${v.id} of ${p.name} is in use: ${users.join("; ")}`, {
            details: { in_use: users },
          });
      }
      for (const v of versions) await removeVersion(c.var.deps, v);
      await deleteProjectRecords(
        store,
        p,
        envs.map((e) => e.id),
      );
      await c.var.deps.buildContexts.prune(
        c.var.teamId,
        await referencedContexts(store, c.var.teamId),
        CONTEXT_GRACE_MS,
      );
      const images = await removeUnusedBuiltImages(store, stacks, c.var.teamId, p.id);
      return c.json({
        deleted: p.name,
        versions_deleted: versions.map((v) => v.id),
        images_removed: images.removed,
      });
    },
  }),
  route({
    method: "put",
    path: "/v1/projects/{id}/branches",
    name: "projects.setBranches",
    summary:
      "Set which branches of a github: project deploy environments named after them (`*` within a path segment, `**` across); null follows x-denv.branches",
    body: setBranchesBody,
    response: projectSchema,
    auth: true,
    handler: async (c, { body }) => {
      const { store } = c.var.deps;
      const p = await findProject(store, c.var.teamId, c.req.param("id") ?? "");
      if (p.source_type !== "github")
        throw new DenvError(
          "invalid_argument",
          `project ${p.name} deploys from ${p.source}; only github: sources deploy branches`,
        );
      const branches_json = body.branches ? JSON.stringify(body.branches) : null;
      await updateProjectSettings(store, p, { branches_json });
      return c.json(serializeProject({ ...p, branches_json }));
    },
  }),
  route({
    method: "get",
    path: "/v1/projects/{id}/previews",
    name: "projects.previews",
    summary:
      "A github: project's pull-request previews: how many it keeps at once, what it does with forks', those running and forks' heads waiting for approval",
    response: previewsSchema,
    auth: true,
    handler: async (c) => {
      const p = await findProject(c.var.deps.store, c.var.teamId, c.req.param("id") ?? "");
      return c.json(await previewsOf(c.var.deps.store, p));
    },
  }),
  route({
    method: "put",
    path: "/v1/projects/{id}/previews",
    name: "projects.setPreviews",
    summary:
      "Set how many previews a project keeps at once (budget) and what a fork's pull request gets (forks: approve, deploy or off)",
    body: setPreviewsBody,
    response: previewsSchema,
    auth: true,
    handler: async (c, { body }) => {
      const { store } = c.var.deps;
      const p = await findProject(store, c.var.teamId, c.req.param("id") ?? "");
      const set = {
        ...(body.budget !== undefined ? { preview_budget: body.budget } : {}),
        ...(body.forks !== undefined ? { fork_previews: body.forks } : {}),
      };
      await updateProjectSettings(store, p, set);
      return c.json(await previewsOf(store, { ...p, ...set }));
    },
  }),
  route({
    method: "post",
    path: "/v1/projects/{id}/previews/{number}/approve",
    name: "projects.approvePreview",
    summary:
      "Approve the head of a fork's pull request that waits: its preview is deployed (starting empty, never from alpha's data)",
    response: z.object({ deployment_id: z.string(), commit: z.string() }),
    status: 202,
    auth: true,
    handler: async (c) => {
      const { store, secrets, github, deployer } = c.var.deps;
      const p = await findProject(store, c.var.teamId, c.req.param("id") ?? "");
      const n = Number(c.req.param("number"));
      if (!Number.isInteger(n) || n < 1 || n > 1e9)
        throw new DenvError("not_found", `no pull request ${c.req.param("number")}`);
      const d = await approvePreview(
        { store, secrets, github, deployer, serverUrl: () => serverOrigin(c) },
        p,
        n,
      );
      return c.json({ deployment_id: d.deploymentId, commit: d.head }, 202);
    },
  }),
  route({
    method: "get",
    path: "/v1/projects/{id}/github",
    name: "projects.github",
    summary:
      "A github: project's environments its webhooks made (alpha, branches, previews), each with its latest commit and deployment",
    response: z.object({ environments: z.array(githubEnvironmentSchema) }),
    auth: true,
    handler: async (c) => {
      const { store } = c.var.deps;
      const p = await findProject(store, c.var.teamId, c.req.param("id") ?? "");
      const rows = await projectGithubDeploys(store, p.id);
      const latest = new Map<string, (typeof rows)[number]>();
      for (const r of rows) if (!latest.has(r.environment_name)) latest.set(r.environment_name, r);
      const environments = [];
      for (const r of latest.values()) {
        const env = await environmentNamed(store, p.id, r.environment_name);
        const d = await deploymentById(store, r.deployment_id);
        environments.push({
          environment: r.environment_name,
          trigger: r.trigger as "push" | "branch" | "preview",
          ref: r.ref,
          commit: r.commit_sha,
          pushed_by: r.pushed_by,
          pull_request: r.pr_number,
          status: env?.status ?? "destroyed",
          deployment_id: r.deployment_id,
          deployment_status: d?.status ?? "unknown",
          check_run_id: r.check_run_id,
        });
      }
      return c.json({ environments });
    },
  }),
  route({
    method: "put",
    path: "/v1/projects/{id}/source",
    name: "projects.setSource",
    summary: "Upload a local project's compose file (and .env)",
    body: uploadSourceBody,
    response: projectSchema,
    auth: true,
    // A compose file and a .env of up to 1 MiB each, in JSON.
    bodyLimitBytes: 3 * JSON_LIMIT_BYTES,
    handler: async (c, { body }) => {
      const { store, secrets } = c.var.deps;
      const p = await findProject(store, c.var.teamId, c.req.param("id") ?? "");
      if (p.source_type !== "local")
        throw new DenvError(
          "conflict",
          `project ${p.name} deploys from ${p.source}; only local projects take uploads`,
        );
      const contexts = body.build_contexts ?? {};
      if (Object.keys(contexts).length > 64)
        throw new DenvError("invalid_argument", "build_contexts: at most 64 build contexts per project");
      for (const [path, digest] of Object.entries(contexts)) {
        if (typeof projectRelativePath(path, "a build context") !== "string")
          throw new DenvError("invalid_argument", `build_contexts: ${path} is not a path inside the project`);
        if ((await c.var.deps.buildContexts.size(c.var.teamId, digest)) === null)
          throw new DenvError(
            "invalid_argument",
            `build_contexts: ${path} names ${digest}, which was not uploaded; PUT /v1/projects/{id}/contexts/${digest} first`,
          );
      }
      const binds = body.bind_sources ?? {};
      if (Object.keys(binds).length > 64)
        throw new DenvError("invalid_argument", "bind_sources: at most 64 bind mount sources per project");
      for (const [path, b] of Object.entries(binds)) {
        // biome-ignore lint/suspicious/noControlCharactersInRegex: a name holding them is refused
        if (projectRelativePath(path, "a bind mount source") !== path || /[\0-\x1f\x7f]/.test(path))
          throw new DenvError(
            "invalid_argument",
            `bind_sources: ${JSON.stringify(path)} is not a normalised path inside the project`,
          );
        if ((await c.var.deps.buildContexts.size(c.var.teamId, b.digest)) === null)
          throw new DenvError(
            "invalid_argument",
            `bind_sources: ${path} names ${b.digest}, which was not uploaded; PUT /v1/projects/{id}/contexts/${b.digest} first`,
          );
      }
      // Sealed at rest: a .env (and often a compose file) holds the team's secrets.
      const sealed = {
        bind_sources_json: JSON.stringify(binds),
        compose_text: secrets.sealText(body.compose),
        dotenv_text: secrets.sealText(body.dotenv ?? null),
        build_contexts_json: JSON.stringify(contexts),
        // Sealed too: a secret's file is the point of it.
        files_text: secrets.sealText(body.files ? JSON.stringify(body.files) : null),
      };
      await setProjectSource(store, p.id, sealed);
      // Contexts no project of the team names any more (and not just uploaded) are let go.
      const kept = await referencedContexts(store, c.var.teamId);
      await c.var.deps.buildContexts.prune(c.var.teamId, kept, CONTEXT_GRACE_MS);
      return c.json(serializeProject({ ...p, ...sealed }));
    },
  }),
  route({
    method: "put",
    path: "/v1/projects/{id}/contexts/{digest}",
    name: "projects.putContext",
    summary:
      "Upload a build context: a tar of the context directory (.dockerignore applied), named by its sha256, which is checked",
    bodyType: "tar",
    response: buildContextSchema,
    auth: true,
    bodyLimitBytes: null,
    handler: async (c) => {
      const { store, buildContexts } = c.var.deps;
      const p = await findProject(store, c.var.teamId, c.req.param("id") ?? "");
      if (p.source_type !== "local")
        throw new DenvError(
          "conflict",
          `project ${p.name} deploys from ${p.source}; its build contexts come from there`,
        );
      const digest = c.req.param("digest") ?? "";
      if (!CONTEXT_DIGEST.test(digest))
        throw new DenvError("invalid_argument", `${digest} is not a sha256: digest of the tar`);
      const size = await buildContexts.put(c.var.teamId, digest, requestBody(c, buildContexts.limitBytes));
      return c.json({ digest, size_bytes: size });
    },
  }),
  route({
    method: "get",
    path: "/v1/projects/{id}/contexts/{digest}",
    name: "projects.hasContext",
    summary: "Whether a build context (a tar, by its sha256) was uploaded: 404 when it was not",
    response: buildContextSchema,
    auth: true,
    handler: async (c) => {
      const { store, buildContexts } = c.var.deps;
      await findProject(store, c.var.teamId, c.req.param("id") ?? "");
      const digest = c.req.param("digest") ?? "";
      const size = await buildContexts.size(c.var.teamId, digest);
      if (size === null) throw new DenvError("not_found", `no build context ${digest} was uploaded`);
      return c.json({ digest, size_bytes: size });
    },
  }),
  route({
    method: "post",
    path: "/v1/projects/{id}/deploy",
    name: "projects.deploy",
    summary: "Deploy the project to an environment (alpha by default); ?wait=true waits for the verdict",
    body: deployBody,
    query: z.object({
      wait: queryFlag.describe("true: answer once the deployment has its verdict; default: at once (202)"),
    }),
    response: deploymentSchema,
    status: 202,
    auth: true,
    handler: async (c, { body, query }) => {
      const { store, deployer } = c.var.deps;
      const p = await findProject(store, c.var.teamId, c.req.param("id") ?? "");
      const wait = query.wait === "true";
      const { deploymentId, done } = await deployer.deploy(p, body.env);
      if (wait) await deployer.awaitVerdict({ deploymentId, done }, "deploy");
      const d = (await deploymentById(store, deploymentId)) as DeploymentsTable;
      return c.json(serializeDeployment(d), wait ? 200 : 202);
    },
  }),
  route({
    method: "post",
    path: "/v1/projects/{id}/promote",
    name: "projects.promote",
    summary:
      "Promote a version to an environment through the gates: fresh fork, dataset consistency, N identical replays, invariants, soak; then the target points at it. ?wait=true waits for the verdict",
    body: promoteBody,
    query: z.object({
      wait: queryFlag.describe("true: answer once the deployment has its verdict; default: at once (202)"),
    }),
    response: deploymentSchema,
    status: 202,
    auth: true,
    handler: async (c, { body, query }) => {
      const { store, deployer, admission } = c.var.deps;
      const p = await findProject(store, c.var.teamId, c.req.param("id") ?? "");
      if (!body.from && !body.version)
        throw new DenvError(
          "invalid_argument",
          "from or version: name the environment or the version to promote",
        );
      if (body.from === body.to)
        throw new DenvError("invalid_argument", `to: ${body.to} is the environment promoted from`);
      const version = await resolveVersionRef(
        store,
        c.var.teamId,
        body.version
          ? body.version.startsWith("ver_")
            ? `${p.name}@${body.version}`
            : body.version
          : `${p.name}/${body.from}`,
      );
      if (version.project_id !== p.id)
        throw new DenvError("invalid_argument", `version: ${version.id} is not a version of ${p.name}`);
      const wait = query.wait === "true";
      const { deploymentId, done } = await deployer.promote(
        admission,
        { project: p, version, fromName: body.from ?? null, target: body.to },
        {
          replays: body.replays ?? 5,
          soakMs: body.soak_ms ?? 10_000,
          ...(body.steps ? { steps: body.steps } : {}),
        },
      );
      if (wait) await deployer.awaitVerdict({ deploymentId, done }, "promote");
      const d = (await deploymentById(store, deploymentId)) as DeploymentsTable;
      return c.json(serializeDeployment(d), wait ? 200 : 202);
    },
  }),
];

/** A project's previews as the API answers them. */
async function previewsOf(store: Store, p: ProjectsTable): Promise<z.infer<typeof previewsSchema>> {
  return {
    budget: p.preview_budget ?? DEFAULT_PREVIEW_BUDGET,
    forks: forkPreviewsOf(p),
    running: await livePreviews(store, p.id),
    waiting: (await previewApprovals(store, p.id)).map((w) => ({
      pull_request: w.pr_number,
      commit: w.head_sha,
      ref: w.ref,
      repository: w.head_repository,
      pushed_by: w.pushed_by,
      since: w.created_at,
    })),
  };
}
