/**
 * Schema migrations, written with Kysely's schema builder so the same steps run on SQLite and
 * PostgreSQL. Applied in order by Kysely's Migrator; each runs once.
 */
import { type Kysely, type Migration, type MigrationProvider, PostgresAdapter, sql } from "kysely";

const text = "text";

export const MIGRATIONS: Record<string, Migration> = {
  "0001_initial": {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable("teams")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("name", text, (c) => c.notNull())
        .addColumn("created_at", text, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("api_keys")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull().references("teams.id"))
        .addColumn("name", text, (c) => c.notNull())
        .addColumn("key_hash", text, (c) => c.notNull().unique())
        .addColumn("prefix", text, (c) => c.notNull())
        .addColumn("admin", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("created_at", text, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("join_tokens")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull().references("teams.id"))
        .addColumn("token_hash", text, (c) => c.notNull().unique())
        .addColumn("expires_at", text, (c) => c.notNull())
        .addColumn("used_at", text)
        .addColumn("host_id", text)
        .execute();
      await db.schema
        .createTable("hosts")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull().references("teams.id"))
        .addColumn("name", text, (c) => c.notNull())
        .addColumn("secret_hash", text, (c) => c.notNull().unique())
        .addColumn("arch", text)
        .addColumn("storage", text)
        .addColumn("capacity_json", text)
        .addColumn("version", text)
        .addColumn("last_seen", text)
        .addColumn("connected", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("created_at", text, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("projects")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull().references("teams.id"))
        .addColumn("name", text, (c) => c.notNull())
        .addColumn("kind", text, (c) => c.notNull())
        .addColumn("source_type", text, (c) => c.notNull())
        .addColumn("source", text, (c) => c.notNull())
        .addColumn("compose_text", text)
        .addColumn("dotenv_text", text)
        .addColumn("pinned_target", text)
        .addColumn("created_at", text, (c) => c.notNull())
        .addUniqueConstraint("projects_team_name", ["team_id", "name"])
        .execute();
      await db.schema
        .createTable("environments")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull().references("teams.id"))
        .addColumn("project_id", text, (c) => c.notNull().references("projects.id"))
        .addColumn("name", text, (c) => c.notNull())
        .addColumn("status", text, (c) => c.notNull())
        .addColumn("host_id", text)
        .addColumn("host_env_id", text)
        .addColumn("current_version_id", text)
        .addColumn("parent_version_id", text)
        .addColumn("sandbox", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("created_at", text, (c) => c.notNull())
        .addUniqueConstraint("environments_project_name", ["project_id", "name"])
        .execute();
      await db.schema
        .createTable("versions")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull().references("teams.id"))
        .addColumn("project_id", text, (c) => c.notNull())
        .addColumn("environment_id", text, (c) => c.notNull())
        .addColumn("host_id", text, (c) => c.notNull())
        .addColumn("spec_json", text, (c) => c.notNull())
        .addColumn("spec_hash", text, (c) => c.notNull())
        .addColumn("images_json", text, (c) => c.notNull())
        .addColumn("evidence_json", text, (c) => c.notNull())
        .addColumn("created_at", text, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("deployments")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull().references("teams.id"))
        .addColumn("environment_id", text, (c) => c.notNull())
        .addColumn("kind", text, (c) => c.notNull())
        .addColumn("status", text, (c) => c.notNull())
        .addColumn("phases_json", text, (c) => c.notNull())
        .addColumn("reason", text)
        .addColumn("state_json", text, (c) => c.notNull())
        .addColumn("created_at", text, (c) => c.notNull())
        .addColumn("finished_at", text)
        .execute();
      await sql`create index deployments_env on deployments (environment_id, created_at)`.execute(db);
    },
  },
  "0002_port_urls": {
    async up(db: Kysely<unknown>) {
      // A port URL is a bearer capability (OpenEnv clients connect with the URL alone): only its
      // hash is kept, like every other secret.
      await db.schema
        .createTable("port_urls")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull())
        .addColumn("environment_id", text, (c) => c.notNull())
        .addColumn("service", text)
        .addColumn("port", "integer", (c) => c.notNull())
        .addColumn("token_hash", text, (c) => c.notNull().unique())
        .addColumn("created_at", text, (c) => c.notNull())
        .execute();
    },
  },
  "0003_clouds": {
    async up(db: Kysely<unknown>) {
      // A connected cloud account; its API token is encrypted (SecretBox), never hashed: the
      // server must send it to the provider again.
      await db.schema
        .createTable("clouds")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull())
        .addColumn("name", text, (c) => c.notNull())
        .addColumn("provider", text, (c) => c.notNull())
        .addColumn("token_sealed", text, (c) => c.notNull())
        .addColumn("server_type", text, (c) => c.notNull())
        .addColumn("location", text, (c) => c.notNull())
        .addColumn("api_url", text)
        .addColumn("created_at", text, (c) => c.notNull())
        .addUniqueConstraint("clouds_team_name", ["team_id", "name"])
        .execute();
      // Machines denv created in a cloud, so failed provisioning (and people) can find them.
      await db.schema
        .createTable("cloud_machines")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull())
        .addColumn("cloud_id", text, (c) => c.notNull())
        .addColumn("provider_server_id", text, (c) => c.notNull())
        .addColumn("name", text, (c) => c.notNull())
        .addColumn("status", text, (c) => c.notNull())
        .addColumn("deployment_id", text)
        .addColumn("created_at", text, (c) => c.notNull())
        .addColumn("deleted_at", text)
        .execute();
    },
  },
  "0004_admin_team": {
    async up(db: Kysely<unknown>) {
      // DENV_ADMIN_KEY binds to the team marked admin, not to whichever team a query returns first.
      await db.schema
        .alterTable("teams")
        .addColumn("admin", "integer", (c) => c.notNull().defaultTo(0))
        .execute();
      // A store from before: the team of the oldest admin key is the admin team.
      await sql`update teams set admin = 1 where id = (select team_id from api_keys where admin = 1 order by created_at limit 1)`.execute(
        db,
      );
      // Port URLs are listed and revoked per environment.
      await sql`create index port_urls_env on port_urls (environment_id)`.execute(db);
    },
  },
  "0005_stack_id": {
    async up(db: Kysely<unknown>) {
      // One name per id: a host's stacks (stk_…) are not the control plane's environments (env_…).
      await db.schema.alterTable("environments").renameColumn("host_env_id", "stack_id").execute();
    },
  },
  "0006_pools": {
    async up(db: Kysely<unknown>) {
      // A warm pool: ready forks of one version, kept at a size; a member is an environment whose
      // pool_id is set, invisible to the team until a create takes it over (pool_id cleared).
      await db.schema
        .createTable("pools")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull())
        .addColumn("project_id", text, (c) => c.notNull())
        .addColumn("version_id", text, (c) => c.notNull())
        .addColumn("size", "integer", (c) => c.notNull())
        .addColumn("source", text, (c) => c.notNull())
        // A pool of image sandboxes: the hash of their settings (image, cmd, env, …), whose
        // first sandbox's version the members are forks of; null for a version's pool.
        .addColumn("image_key", text)
        .addColumn("hits", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("misses", "integer", (c) => c.notNull().defaultTo(0))
        .addColumn("created_at", text, (c) => c.notNull())
        .addUniqueConstraint("pools_team_version", ["team_id", "version_id"])
        .execute();
      await db.schema.alterTable("environments").addColumn("pool_id", text).execute();
      await sql`create index environments_pool on environments (pool_id)`.execute(db);
    },
  },
  "0007_replays": {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable("replays")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull())
        .addColumn("version_id", text, (c) => c.notNull())
        .addColumn("status", text, (c) => c.notNull())
        .addColumn("request_json", text, (c) => c.notNull())
        .addColumn("report_json", text)
        .addColumn("created_at", text, (c) => c.notNull())
        .addColumn("finished_at", text)
        .execute();
      await sql`create index replays_version on replays (team_id, version_id)`.execute(db);
    },
  },
  "0008_build_contexts": {
    async up(db: Kysely<unknown>) {
      // For local sources: which uploaded context tar each build context path is (JSON).
      await db.schema.alterTable("projects").addColumn("build_contexts_json", text).execute();
    },
  },
  "0009_people": {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable("api_keys").addColumn("user_id", text).execute();
      await db.schema
        .alterTable("api_keys")
        .addColumn("role", text, (c) => c.notNull().defaultTo("admin"))
        .execute();
      await db.schema.alterTable("api_keys").addColumn("last_used_at", text).execute();
      await db.schema
        .createTable("users")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("email", text, (c) => c.notNull().unique())
        .addColumn("password_hash", text, (c) => c.notNull())
        .addColumn("created_at", text, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("memberships")
        .addColumn("user_id", text, (c) => c.notNull())
        .addColumn("team_id", text, (c) => c.notNull())
        .addColumn("role", text, (c) => c.notNull())
        .addColumn("created_at", text, (c) => c.notNull())
        .addPrimaryKeyConstraint("memberships_pk", ["user_id", "team_id"])
        .execute();
      await db.schema
        .createTable("sessions")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("user_id", text, (c) => c.notNull())
        .addColumn("team_id", text, (c) => c.notNull())
        .addColumn("token_hash", text, (c) => c.notNull().unique())
        .addColumn("csrf_hash", text, (c) => c.notNull())
        .addColumn("created_at", text, (c) => c.notNull())
        .addColumn("expires_at", text, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("device_codes")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("device_code_hash", text, (c) => c.notNull().unique())
        .addColumn("user_code", text, (c) => c.notNull().unique())
        .addColumn("client_name", text, (c) => c.notNull())
        .addColumn("status", text, (c) => c.notNull())
        .addColumn("user_id", text)
        .addColumn("team_id", text)
        .addColumn("key_id", text)
        .addColumn("created_at", text, (c) => c.notNull())
        .addColumn("expires_at", text, (c) => c.notNull())
        .addColumn("last_poll_at", text)
        .execute();
      await db.schema
        .createTable("invitations")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull())
        .addColumn("email", text, (c) => c.notNull())
        .addColumn("role", text, (c) => c.notNull())
        .addColumn("token_hash", text, (c) => c.notNull().unique())
        .addColumn("created_by", text, (c) => c.notNull())
        .addColumn("created_at", text, (c) => c.notNull())
        .addColumn("expires_at", text, (c) => c.notNull())
        .addColumn("accepted_at", text)
        .execute();
    },
  },
  "0010_project_files": {
    // The project's files its compose file reads (env_file, secrets' file:), sealed JSON.
    up: async (db) => {
      await db.schema.alterTable("projects").addColumn("files_text", text).execute();
    },
  },
  "0011_bind_sources": {
    // The tars of the project's files its relative bind mounts name: {path: {digest, type}} (JSON).
    up: async (db) => {
      await db.schema.alterTable("projects").addColumn("bind_sources_json", text).execute();
    },
  },
  "0012_targets": {
    // Where each environment runs and each version lives (targets/target.ts): every one so far on
    // the team's sidecar hosts.
    up: async (db) => {
      await db.schema
        .alterTable("environments")
        .addColumn("target_id", text, (c) => c.notNull().defaultTo("denvd"))
        .execute();
      await db.schema
        .alterTable("versions")
        .addColumn("target_id", text, (c) => c.notNull().defaultTo("denvd"))
        .execute();
    },
  },
  "0013_hosted_versions": {
    // A version that lives at a hosted provider (its snapshot there, `snapshot_ref`) has no host:
    // host_id becomes nullable. SQLite cannot drop a NOT NULL in place, so there the table is made
    // again and its rows copied (nothing references versions); PostgreSQL alters the column.
    up: async (db) => {
      await db.schema.alterTable("versions").addColumn("snapshot_ref", text).execute();
      // Asked of the adapter, not by a query: a failed query aborts PostgreSQL's transaction.
      if (db.getExecutor().adapter instanceof PostgresAdapter) {
        await sql`alter table versions alter column host_id drop not null`.execute(db);
        return;
      }
      await db.schema
        .createTable("versions_next")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull().references("teams.id"))
        .addColumn("project_id", text, (c) => c.notNull())
        .addColumn("environment_id", text, (c) => c.notNull())
        .addColumn("host_id", text)
        .addColumn("spec_json", text, (c) => c.notNull())
        .addColumn("spec_hash", text, (c) => c.notNull())
        .addColumn("images_json", text, (c) => c.notNull())
        .addColumn("evidence_json", text, (c) => c.notNull())
        .addColumn("created_at", text, (c) => c.notNull())
        .addColumn("target_id", text, (c) => c.notNull().defaultTo("denvd"))
        .addColumn("snapshot_ref", text)
        .execute();
      const columns = sql.raw(
        "id, team_id, project_id, environment_id, host_id, spec_json, spec_hash, images_json, evidence_json, created_at, target_id, snapshot_ref",
      );
      await sql`insert into versions_next (${columns}) select ${columns} from versions`.execute(db);
      await db.schema.dropTable("versions").execute();
      await db.schema.alterTable("versions_next").renameTo("versions").execute();
    },
  },
  "0014_version_replicas": {
    // Copies of a version's snapshots on hosts other than the one that took it (fleet/replication.ts).
    up: async (db) => {
      await db.schema
        .createTable("version_replicas")
        .addColumn("version_id", text, (c) => c.notNull())
        .addColumn("host_id", text, (c) => c.notNull())
        .addColumn("team_id", text, (c) => c.notNull())
        .addColumn("source_host_id", text, (c) => c.notNull())
        .addColumn("format", text, (c) => c.notNull())
        .addColumn("evidence_json", text, (c) => c.notNull())
        .addColumn("created_at", text, (c) => c.notNull())
        .addPrimaryKeyConstraint("version_replicas_pk", ["version_id", "host_id"])
        .execute();
      await db.schema.createIndex("version_replicas_host").on("version_replicas").column("host_id").execute();
      // x-denv.replicas (or `denv version replicate --copies`): the copies kept of a version; null: no rule.
      await db.schema.alterTable("versions").addColumn("replicas", "integer").execute();
      // `denv host drain`: a draining host takes no new environment, replica or pool member.
      await db.schema
        .alterTable("hosts")
        .addColumn("draining", "integer", (c) => c.notNull().defaultTo(0))
        .execute();
    },
  },
  "0015_server_replicas": {
    // Several `denv server` replicas on one PostgreSQL (replicas/): each says it is alive, names
    // the address its peers reach it at, holds its hosts' connections, and leases its deployments.
    up: async (db) => {
      await db.schema
        .createTable("server_replicas")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("url", text, (c) => c.notNull())
        .addColumn("started_at", "bigint", (c) => c.notNull())
        .addColumn("seen_at", "bigint", (c) => c.notNull())
        .execute();
      // The replica holding the host's connection now (null: none, or a single-replica server).
      await db.schema.alterTable("hosts").addColumn("replica_id", text).execute();
      // The replica running the deployment, until lease_until (ms); a lapsed lease is taken over.
      await db.schema.alterTable("deployments").addColumn("lease_owner", text).execute();
      await db.schema.alterTable("deployments").addColumn("lease_until", "bigint").execute();
    },
  },
  "0016_e2b_sandboxes": {
    // Sandboxes made through the E2B-compatible surface (e2b/): who made one (its envd calls act as
    // that key), its template, metadata and env vars, and when its timeout ends it. Its access token
    // is derived from the server's key and the salt, never stored.
    up: async (db) => {
      await db.schema
        .createTable("e2b_sandboxes")
        .addColumn("environment_id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull())
        .addColumn("key_id", text, (c) => c.notNull())
        .addColumn("template_id", text, (c) => c.notNull())
        .addColumn("token_salt", text, (c) => c.notNull())
        .addColumn("metadata_json", text, (c) => c.notNull())
        .addColumn("env_vars_sealed", text, (c) => c.notNull())
        .addColumn("started_at_ms", "bigint", (c) => c.notNull())
        .addColumn("end_at_ms", "bigint", (c) => c.notNull())
        .execute();
      await db.schema.createIndex("e2b_sandboxes_team").on("e2b_sandboxes").column("team_id").execute();
    },
  },
  "0017_ingress_names": {
    // Ingress names an environment's deploy claimed (ingress/ingress-routes.ts): a host name, the
    // service and port it reaches, and whether it answers without the environment's token. A
    // readable name is held by the first environment to claim it until that one is gone.
    up: async (db) => {
      await db.schema
        .createTable("ingress_names")
        .addColumn("host", text, (c) => c.primaryKey())
        .addColumn("environment_id", text, (c) => c.notNull())
        .addColumn("team_id", text, (c) => c.notNull())
        .addColumn("service", text, (c) => c.notNull())
        .addColumn("port", "integer", (c) => c.notNull())
        .addColumn("public", "integer", (c) => c.notNull())
        .addColumn("created_at", text, (c) => c.notNull())
        .execute();
      await db.schema.createIndex("ingress_names_env").on("ingress_names").column("environment_id").execute();
    },
  },
  "0018_e2b_snapshots": {
    // Snapshots taken through E2B's API: the denv version each is, the sandbox it came from, and
    // the name given (a template name: the team's newest snapshot of that name is what it means).
    up: async (db) => {
      await db.schema
        .createTable("e2b_snapshots")
        .addColumn("version_id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull())
        .addColumn("sandbox_id", text, (c) => c.notNull())
        .addColumn("name", text)
        .addColumn("created_at_ms", "bigint", (c) => c.notNull())
        .execute();
      await db.schema
        .createIndex("e2b_snapshots_team")
        .on("e2b_snapshots")
        .columns(["team_id", "name"])
        .execute();
    },
  },
  "0019_e2b_paused": {
    // A paused E2B sandbox: the version its pause took (its containers stopped); resuming restores
    // it in place, so the sandbox keeps its id.
    up: async (db) => {
      await db.schema.alterTable("e2b_sandboxes").addColumn("paused_version_id", text).execute();
    },
  },
  "0020_github": {
    // A team's GitHub App (its private key and webhook secret sealed), the deliveries it was sent
    // (one row each: a redelivery of the same id changes nothing), what each project deploys from
    // on GitHub, and what each deployment a webhook started reports back there.
    up: async (db) => {
      await db.schema
        .createTable("github_apps")
        .addColumn("id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull())
        .addColumn("app_id", text, (c) => c.notNull().unique())
        .addColumn("slug", text, (c) => c.notNull())
        .addColumn("api_url", text, (c) => c.notNull())
        .addColumn("private_key_sealed", text, (c) => c.notNull())
        .addColumn("webhook_secret_sealed", text, (c) => c.notNull())
        .addColumn("created_at", text, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable("github_deliveries")
        .addColumn("delivery_id", text, (c) => c.primaryKey())
        .addColumn("app_row_id", text, (c) => c.notNull())
        .addColumn("event", text, (c) => c.notNull())
        // The signature covers the body, not the delivery id: a captured delivery sent again
        // under a new id is the same body, refused by this.
        .addColumn("body_sha256", text, (c) => c.notNull())
        .addColumn("outcome", text, (c) => c.notNull())
        .addColumn("received_at", text, (c) => c.notNull())
        .addUniqueConstraint("github_deliveries_body", ["app_row_id", "body_sha256"])
        .execute();
      await db.schema
        .createTable("github_deploys")
        .addColumn("deployment_id", text, (c) => c.primaryKey())
        .addColumn("team_id", text, (c) => c.notNull())
        .addColumn("project_id", text, (c) => c.notNull())
        .addColumn("environment_name", text, (c) => c.notNull())
        .addColumn("trigger", text, (c) => c.notNull())
        .addColumn("commit_sha", text, (c) => c.notNull())
        .addColumn("ref", text, (c) => c.notNull())
        .addColumn("pushed_by", text)
        .addColumn("pr_number", "integer")
        .addColumn("check_run_id", text)
        .addColumn("gh_deployment_id", text)
        .addColumn("created_at", text, (c) => c.notNull())
        .execute();
      await db.schema.alterTable("projects").addColumn("github_app_row_id", text).execute();
      await db.schema.alterTable("projects").addColumn("github_installation_id", text).execute();
      await db.schema.alterTable("projects").addColumn("github_repository_id", text).execute();
      await db.schema.alterTable("projects").addColumn("branches_json", text).execute();
    },
  },
  "0021_gpus": {
    // A host's GPUs as its hello reported them, and the GPUs (by UUID, per service) each
    // environment holds on its host: placement gives each GPU to one environment at a time.
    up: async (db) => {
      await db.schema.alterTable("hosts").addColumn("gpus_json", text).execute();
      await db.schema.alterTable("environments").addColumn("gpus_json", text).execute();
    },
  },
  "0022_previews": {
    // How many pull-request previews a project keeps at once, what it does with a fork's (deploy,
    // wait for a member's approval, or none), and the forks' heads waiting for that approval.
    up: async (db) => {
      await db.schema.alterTable("projects").addColumn("preview_budget", "integer").execute();
      await db.schema.alterTable("projects").addColumn("fork_previews", text).execute();
      await db.schema
        .createTable("preview_approvals")
        .addColumn("project_id", text, (c) => c.notNull())
        .addColumn("pr_number", "integer", (c) => c.notNull())
        .addColumn("team_id", text, (c) => c.notNull())
        .addColumn("head_sha", text, (c) => c.notNull())
        .addColumn("ref", text, (c) => c.notNull())
        .addColumn("head_repository", text, (c) => c.notNull())
        .addColumn("pushed_by", text)
        .addColumn("installation_id", text, (c) => c.notNull())
        .addColumn("created_at", text, (c) => c.notNull())
        .addPrimaryKeyConstraint("preview_approvals_pk", ["project_id", "pr_number"])
        .execute();
    },
  },
  "0023_replay_progress": {
    // How many of a replay's forks have run their episode so far: what `denv replay` shows while
    // it waits, read from any replica.
    up: async (db) => {
      await db.schema.alterTable("replays").addColumn("forks_done", "integer").execute();
    },
  },
  "0024_deployment_cancel": {
    // Who asked for a deployment to stop (`denv deployment cancel`): the replica running it reads
    // it back with each phase it writes, and stops before the next phase.
    up: async (db) => {
      await db.schema.alterTable("deployments").addColumn("cancel_requested_by", "text").execute();
    },
  },
  "0025_e2b_auto_pause": {
    // E2B's autoPause (its timeout pauses it, keeping memory, instead of killing it) and
    // autoResume (the next envd call to a paused one resumes it): 1 when asked for.
    up: async (db) => {
      await db.schema.alterTable("e2b_sandboxes").addColumn("auto_pause", "integer").execute();
      await db.schema.alterTable("e2b_sandboxes").addColumn("auto_resume", "integer").execute();
    },
  },
  "0026_idle_pause": {
    // x-denv.idle_pause_s: its seconds, when the last request reached the environment (ISO), and
    // 1 while it is paused by that timer (the next request resumes it; a pause asked for does not).
    up: async (db) => {
      await db.schema.alterTable("environments").addColumn("idle_pause_s", "integer").execute();
      await db.schema.alterTable("environments").addColumn("active_at", "text").execute();
      await db.schema.alterTable("environments").addColumn("idle_paused", "integer").execute();
    },
  },
};

export const migrationProvider: MigrationProvider = {
  getMigrations: async () => MIGRATIONS,
};
