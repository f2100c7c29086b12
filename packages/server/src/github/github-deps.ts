/**
 * What the GitHub integration's webhooks and its reports back to GitHub work with: a file of its
 * own, so that the webhooks (which start deployments) and the reports (which follow them) both
 * import it and neither imports the other back.
 */
import type { SecretBox } from "../clouds/secret-box.ts";
import type { Deployer } from "../deployments/deployer.ts";
import type { Store } from "../store/open-store.ts";
import type { GitHubApps } from "./github-apps.ts";

export interface WebhookDeps {
  store: Store;
  secrets: SecretBox;
  github: GitHubApps;
  deployer: Deployer;
  /** The console's origin, for check runs' details links. */
  serverUrl: () => string;
}
