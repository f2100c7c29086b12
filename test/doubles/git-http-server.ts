/**
 * A git server over smart HTTP on this machine, for tests of git sources: Node serves requests
 * through git's own CGI program (git http-backend) from a directory of repositories.
 */
import { spawn } from "node:child_process";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";

export interface GitHttpServer {
  /** http://127.0.0.1:PORT */
  url: string;
  /** host:port, as a fetch allowlist names it. */
  host: string;
  close(): Promise<void>;
}

export async function startGitHttpServer(root: string): Promise<GitHttpServer> {
  const server: Server = createServer(gitHttpBackend(root));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    host: `127.0.0.1:${port}`,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

/** Serves one request through git http-backend from the repositories under `root`. */
export function gitHttpBackend(root: string) {
  return (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? "/", "http://x");
    const child = spawn("git", ["http-backend"], {
      env: {
        PATH: process.env.PATH,
        GIT_PROJECT_ROOT: root,
        GIT_HTTP_EXPORT_ALL: "1",
        PATH_INFO: decodeURIComponent(url.pathname),
        QUERY_STRING: url.search.slice(1),
        REQUEST_METHOD: req.method ?? "GET",
        CONTENT_TYPE: req.headers["content-type"] ?? "",
        REMOTE_ADDR: "127.0.0.1",
        ...(req.headers["content-encoding"]
          ? { HTTP_CONTENT_ENCODING: req.headers["content-encoding"] }
          : {}),
        ...(req.headers["git-protocol"] ? { GIT_PROTOCOL: String(req.headers["git-protocol"]) } : {}),
      },
    });
    req.pipe(child.stdin);
    let head = Buffer.alloc(0);
    let sentHead = false;
    child.stdout.on("data", (chunk: Buffer) => {
      if (sentHead) return void res.write(chunk);
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf("\r\n\r\n");
      if (end === -1) return;
      sentHead = true;
      let status = 200;
      for (const line of head.subarray(0, end).toString().split("\r\n")) {
        const [k = "", ...v] = line.split(":");
        const value = v.join(":").trim();
        if (k.toLowerCase() === "status") status = Number(value.split(" ")[0]);
        else res.setHeader(k, value);
      }
      res.writeHead(status);
      res.write(head.subarray(end + 4));
    });
    child.stdout.on("end", () => res.end());
    child.on("error", () => res.destroy());
  };
}
