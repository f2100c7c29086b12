/** What a new host fetches, with no key: the installer and the denvd executables (downloads.ts). */
import { download, installScript } from "../downloads.ts";
import { type ApiRoute, route } from "./api-route.ts";

export const downloadRoutes: ApiRoute[] = [
  route({
    method: "get",
    path: "/install.sh",
    name: "meta.installScript",
    summary:
      "The host installer: curl -fsSL SERVER/install.sh | sh -s -- --token T --server URL [--zfs-pool NAME | --btrfs-pool PATH]",
    responseType: "any",
    auth: false,
    handler: (c) =>
      c.body(installScript(new URL(c.req.url).origin), 200, { "content-type": "text/x-shellscript" }),
  }),
  route({
    method: "get",
    path: "/v1/downloads/{file}",
    name: "meta.download",
    summary: "denvd executables: denvd-linux-x86_64, denvd-linux-aarch64, and denvd.version",
    responseType: "any",
    auth: false,
    handler: (c) => download(c.var.deps.downloadsDir, c.req.param("file") ?? ""),
  }),
];
