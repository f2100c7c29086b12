/** The store's tables, as Kysely sees them. JSON columns hold text; timestamps are ISO strings. */
import type { Generated } from "kysely";

export interface TeamsTable {
  id: string;
  name: string;
  /** 1 for the team the first start made (where DENV_ADMIN_KEY belongs). */
  admin: Generated<number>;
  created_at: string;
}

export interface ApiKeysTable {
  id: string;
  team_id: string;
  name: string;
  /** sha256 of the key; the key itself is shown once and never stored. */
  key_hash: string;
  prefix: string;
  /** May create teams and keys. */
  admin: number;
  created_at: string;
  /** The person it was made for (device login), or null for a team's own key. */
  user_id: string | null;
  /** What the key may do in its team: admin, member or read-only (GET only). */
  role: Generated<string>;
  last_used_at: string | null;
}

export interface UsersTable {
  id: string;
  /** Lower-cased; unique. */
  email: string;
  /** scrypt (people/password-hash.ts). */
  password_hash: string;
  created_at: string;
}

export interface MembershipsTable {
  user_id: string;
  team_id: string;
  /** admin (manages people and keys), member, read-only. */
  role: string;
  created_at: string;
}

export interface SessionsTable {
  id: string;
  user_id: string;
  /** The team the session acts in. */
  team_id: string;
  /** sha256 of the cookie's token. */
  token_hash: string;
  /** sha256 of the CSRF token every state-changing request of the session must carry. */
  csrf_hash: string;
  created_at: string;
  expires_at: string;
}

export interface DeviceCodesTable {
  id: string;
  /** sha256 of the secret the CLI polls with. */
  device_code_hash: string;
  /** What the person types or sees: XXXX-XXXX. */
  user_code: string;
  client_name: string;
  /** pending, approved, denied, used. */
  status: string;
  user_id: string | null;
  team_id: string | null;
  key_id: string | null;
  created_at: string;
  expires_at: string;
  last_poll_at: string | null;
}

export interface InvitationsTable {
  id: string;
  team_id: string;
  email: string;
  role: string;
  /** sha256 of the invitation's token (the link's secret). */
  token_hash: string;
  created_by: string;
  created_at: string;
  expires_at: string;
  accepted_at: string | null;
}

export interface JoinTokensTable {
  id: string;
  team_id: string;
  token_hash: string;
  expires_at: string;
  used_at: string | null;
  host_id: string | null;
}

export interface HostsTable {
  id: string;
  team_id: string;
  name: string;
  secret_hash: string;
  arch: string | null;
  storage: string | null;
  capacity_json: string | null;
  version: string | null;
  last_seen: string | null;
  connected: number;
  /** 1 while drained (`denv host drain`): it takes no new environment, replica or pool member. */
  draining: number;
  /** The server replica holding its connection now (replicas/); null: none. */
  replica_id: string | null;
  created_at: string;
  /** Its GPUs as its hello said (GpuInventory JSON); null: it said nothing (none). */
  gpus_json?: string | null;
}

export interface ProjectsTable {
  id: string;
  team_id: string;
  name: string;
  kind: string;
  source_type: string;
  source: string;
  /** For local sources: the uploaded compose file and .env, sealed (SecretBox.sealText). */
  compose_text: string | null;
  dotenv_text: string | null;
  /** For local sources: {context path: sha256:…} of the build contexts uploaded with the file (JSON). */
  build_contexts_json?: string | null;
  /** The files the compose file reads (env_file, secrets' file:), path → text, sealed JSON. */
  files_text?: string | null;
  /** For local sources: {path: {digest, type}} of the bind mounts' uploaded tars (JSON). */
  bind_sources_json?: string | null;
  pinned_target: string | null;
  created_at: string;
  /** A github: source: the team's App (github_apps.id) and the installation and repository it reads. */
  github_app_row_id?: string | null;
  github_installation_id?: string | null;
  github_repository_id?: string | null;
  /** Branch patterns whose pushes deploy an environment named after the branch (JSON array). */
  branches_json?: string | null;
  /** Pull-request previews kept at once (null: DEFAULT_PREVIEW_BUDGET). */
  preview_budget?: number | null;
  /** A fork's pull request: "approve" (waits for a member; null means this), "deploy" or "off". */
  fork_previews?: string | null;
}

/** A fork's pull request head, waiting for a member to approve its preview. */
export interface PreviewApprovalsTable {
  project_id: string;
  pr_number: number;
  team_id: string;
  head_sha: string;
  ref: string;
  /** The fork's repository (OWNER/REPO), as the delivery named it. */
  head_repository: string;
  pushed_by: string | null;
  installation_id: string;
  created_at: string;
}

export interface EnvironmentsTable {
  id: string;
  team_id: string;
  project_id: string;
  name: string;
  status: string;
  host_id: string | null;
  /** The stack on its host that serves it now (stk_…; changes when a deploy replaces the stack). */
  stack_id: string | null;
  current_version_id: string | null;
  parent_version_id: string | null;
  /** The GPUs it holds on its host, per service (UUIDs, JSON); null: none. */
  gpus_json?: string | null;
  sandbox: number;
  /** The target it runs on (targets/target.ts): "denvd" for the team's sidecar hosts. */
  target_id: string;
  /** Set while the environment is a warm pool's member: not the team's to see until taken. */
  pool_id: string | null;
  /** x-denv.idle_pause_s of the spec it runs; null: never paused for idleness. */
  idle_pause_s?: number | null;
  /** When a request last reached it (exec, files, logs, a port URL), for that timer. */
  active_at?: string | null;
  /** 1 while the idle timer keeps it paused: the next request resumes it. */
  idle_paused?: number | null;
  created_at: string;
}

export interface VersionsTable {
  id: string;
  team_id: string;
  project_id: string;
  environment_id: string;
  /** The host holding its snapshots; null for a version at a hosted provider. */
  host_id: string | null;
  /** The target it lives on (for "denvd", host_id says which host holds its snapshots). */
  target_id: string;
  /** At a hosted provider: the provider's id of its snapshot, which forks are made from. */
  snapshot_ref: string | null;
  /** Copies kept on distinct hosts (x-denv.replicas); null: no rule, only those asked for. */
  replicas: number | null;
  /** The resolved spec, sealed: it holds the values interpolated from the project's .env. */
  spec_json: string;
  spec_hash: string;
  images_json: string;
  evidence_json: string;
  created_at: string;
}

/** A version's copy on a host other than the one that took it: forks of it can run there too. */
export interface VersionReplicasTable {
  version_id: string;
  host_id: string;
  team_id: string;
  /** The host it was copied from. */
  source_host_id: string;
  /** How it travelled: btrfs-send, zfs-send or tar. */
  format: string;
  /** The transfer: bytes per volume, their sha256, time taken, the base of an incremental stream. */
  evidence_json: string;
  created_at: string;
}

/** A sandbox made through the E2B-compatible surface (e2b/): the environment it is, and its E2B settings. */
export interface E2bSandboxesTable {
  environment_id: string;
  team_id: string;
  /** The API key that made it: its envd calls act as this key (and stop if it is revoked). */
  key_id: string;
  /** The templateID it was created from, as given. */
  template_id: string;
  /** Mixed with the server's key into the sandbox's envd access token (which is never stored). */
  token_salt: string;
  metadata_json: string;
  /** The envVars every command gets, sealed by the server's SecretBox. */
  env_vars_sealed: string;
  started_at_ms: number | string;
  /** When its timeout ends it (ms since the epoch). */
  end_at_ms: number | string;
  /** Set while it is paused: the version its pause took, which resuming restores. */
  paused_version_id: string | null;
  /** E2B's autoPause: its timeout pauses it instead of killing it, keeping memory (1) or not (2). */
  auto_pause?: number | null;
  /** E2B's autoResume: 1, the next envd call to it while paused resumes it. */
  auto_resume?: number | null;
}

export interface DeploymentsTable {
  id: string;
  team_id: string;
  environment_id: string;
  kind: string;
  status: string;
  phases_json: string;
  reason: string | null;
  /** Operation state that survives a server restart (the host env being built, the previous one). */
  state_json: string;
  created_at: string;
  finished_at: string | null;
  /** The server replica running it, while lease_until (ms since the epoch; bigint) is ahead. */
  lease_owner: string | null;
  lease_until: number | string | null;
  /** Who asked it to stop (a key's or a person's id); it stops before its next phase. */
  cancel_requested_by?: string | null;
}

export interface GithubAppsTable {
  id: string;
  team_id: string;
  /** GitHub's id of the App (the JWT's iss). */
  app_id: string;
  slug: string;
  /** The REST API's base (https://api.github.com, or a GitHub Enterprise Server's /api/v3). */
  api_url: string;
  private_key_sealed: string;
  webhook_secret_sealed: string;
  created_at: string;
}

export interface GithubDeliveriesTable {
  /** X-GitHub-Delivery: the same on a redelivery. */
  delivery_id: string;
  app_row_id: string;
  event: string;
  /** sha256 of the raw body: the same signed body under another delivery id is a replay. */
  body_sha256: string;
  /** What denv did with it, in words (shown by GET /v1/github/deliveries). */
  outcome: string;
  received_at: string;
}

export interface GithubDeploysTable {
  deployment_id: string;
  team_id: string;
  project_id: string;
  environment_name: string;
  /** push (the default branch), branch (one opted in), preview (a pull request). */
  trigger: string;
  commit_sha: string;
  ref: string;
  pushed_by: string | null;
  pr_number: number | null;
  check_run_id: string | null;
  gh_deployment_id: string | null;
  created_at: string;
}

export interface MigrationsTable {
  id: Generated<number>;
  name: string;
  applied_at: string;
}

export interface E2bSnapshotsTable {
  version_id: string;
  team_id: string;
  /** The E2B sandbox id it was taken of. */
  sandbox_id: string;
  name: string | null;
  created_at_ms: number | string;
}

export interface IngressNamesTable {
  /** The host name, lowercase, without a port. */
  host: string;
  environment_id: string;
  team_id: string;
  service: string;
  port: number;
  /** 1 when the name answers without the environment's ingress token. */
  public: number;
  created_at: string;
}

export interface PortUrlsTable {
  id: string;
  team_id: string;
  environment_id: string;
  service: string | null;
  port: number;
  token_hash: string;
  created_at: string;
}

export interface CloudsTable {
  id: string;
  team_id: string;
  name: string;
  provider: string;
  token_sealed: string;
  server_type: string;
  location: string;
  api_url: string | null;
  created_at: string;
}

export interface CloudMachinesTable {
  id: string;
  team_id: string;
  cloud_id: string;
  provider_server_id: string;
  name: string;
  /** creating, joined, deleted */
  status: string;
  deployment_id: string | null;
  created_at: string;
  deleted_at: string | null;
}

/** A replay of a version: N forks ran one episode; the report compares them (replay-report.ts). */
export interface ReplaysTable {
  id: string;
  team_id: string;
  version_id: string;
  /** running, identical, diverged, or failed (no fork could run the episode, or the server stopped). */
  status: string;
  /** The request (forks, parallel, steps) and, once done, the report. */
  request_json: string;
  report_json: string | null;
  /** Forks that have run the episode (or failed to); null before the first. */
  forks_done?: number | null;
  created_at: string;
  finished_at: string | null;
}

export interface PoolsTable {
  id: string;
  team_id: string;
  project_id: string;
  version_id: string;
  /** Ready members kept. */
  size: number;
  /** Who asked for it: "api" (denv pool set) or "x-denv" (the compose file's x-denv.pool). */
  source: string;
  /**
   * For a pool of image sandboxes: the hash of their settings (sandboxImageKey); its members are
   * forks of the version of a first sandbox made with them. Null for a version's pool.
   */
  image_key: string | null;
  /** Creates served from the pool, and creates that found it empty (a cold fork). */
  hits: number;
  misses: number;
  created_at: string;
}

/** A running `denv server` replica (replicas/replica-registry.ts). Times: ms (bigint). */
export interface ServerReplicasTable {
  id: string;
  /** Where its peers reach it (its own API listener). */
  url: string;
  started_at: number | string;
  seen_at: number | string;
}

export interface Database {
  server_replicas: ServerReplicasTable;
  teams: TeamsTable;
  api_keys: ApiKeysTable;
  join_tokens: JoinTokensTable;
  hosts: HostsTable;
  projects: ProjectsTable;
  environments: EnvironmentsTable;
  versions: VersionsTable;
  version_replicas: VersionReplicasTable;
  e2b_sandboxes: E2bSandboxesTable;
  deployments: DeploymentsTable;
  port_urls: PortUrlsTable;
  ingress_names: IngressNamesTable;
  e2b_snapshots: E2bSnapshotsTable;
  github_apps: GithubAppsTable;
  github_deliveries: GithubDeliveriesTable;
  github_deploys: GithubDeploysTable;
  preview_approvals: PreviewApprovalsTable;
  clouds: CloudsTable;
  cloud_machines: CloudMachinesTable;
  pools: PoolsTable;
  replays: ReplaysTable;
  users: UsersTable;
  memberships: MembershipsTable;
  sessions: SessionsTable;
  device_codes: DeviceCodesTable;
  invitations: InvitationsTable;
}
