/**
 * Port URLs are never served on the API's (and console's) origin: a sandbox's page here would run
 * with the console's rights. The path answers 404 and says where port URLs live now.
 */
import { DenvError } from "@denv/protocol";
import { type ApiRoute, route } from "./api-route.ts";

export const tunnelRoutes: ApiRoute[] = [
  route({
    method: "get",
    path: "/v1/tunnels/{token}/{path}",
    name: "meta.tunnel",
    summary:
      "Not served here: port URLs live on the ports origin (denv server --ports-origin), never on the API's",
    responseType: "any",
    auth: false,
    bodyLimitBytes: null,
    anyMethodAndSubpaths: true,
    handler: (c) => {
      throw new DenvError(
        "not_found",
        `port URLs are served on their own origin (${c.var.deps.portsOrigin.template}), not on the API's; ask POST /v1/envs/{id}/ports/{port} for one`,
      );
    },
  }),
];
