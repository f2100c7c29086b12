/** Port URLs: the token in the path is the credential (a bearer capability), not an API key. */
import { DenvError } from "@denv/protocol";
import { proxyHttp, splitTunnelPath } from "../port-tunnels.ts";
import { type ApiRoute, route } from "./api-route.ts";

export const tunnelRoutes: ApiRoute[] = [
  route({
    method: "get",
    path: "/v1/tunnels/{token}/{path}",
    summary:
      "Any method, and WebSocket upgrades: relayed to the port a port URL names, with {path} as the request path",
    responseType: "any",
    auth: false,
    // The body streams through to the service; nothing is buffered here.
    bodyLimitBytes: null,
    anyMethodAndSubpaths: true,
    handler: (c) => {
      const u = new URL(c.req.url);
      const parts = splitTunnelPath(u.pathname + u.search);
      if (!parts) throw new DenvError("not_found", "no such port URL");
      return proxyHttp(c.var.deps.store, c.var.deps.hub, parts.token, parts.rest, c.req.raw);
    },
  }),
];
