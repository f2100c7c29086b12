/** Helpers for end-to-end tests that talk to the real Docker engine. */
import { PassThrough } from "node:stream";
import Docker from "dockerode";
import { waitFor } from "./wait-for.ts";

export interface ExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

/** Runs argv in a container through the Engine API and collects its output. */
export async function execIn(container: Docker.Container, cmd: string[], user?: string): Promise<ExecResult> {
  const exec = await container.exec({ Cmd: cmd, AttachStdout: true, AttachStderr: true, User: user ?? "" });
  const stream = await exec.start({ hijack: true, stdin: false });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  const stdout = new PassThrough().on("data", (b: Buffer) => out.push(b));
  const stderr = new PassThrough().on("data", (b: Buffer) => err.push(b));
  container.modem.demuxStream(stream, stdout, stderr);
  await new Promise<void>((resolve, reject) => {
    stream.on("end", resolve).on("close", resolve).on("error", reject);
  });
  const info = await exec.inspect();
  return {
    exitCode: info.ExitCode ?? -1,
    stdout: Buffer.concat(out).toString(),
    stderr: Buffer.concat(err).toString(),
  };
}

/** Polls the engine's health status until healthy; resolves to the milliseconds it took. */
export async function waitHealthy(container: Docker.Container, timeoutMs: number): Promise<number> {
  const start = Date.now();
  let exited: Error | undefined;
  await waitFor(
    "the container to be healthy",
    async () => {
      const info = await container.inspect();
      if (info.State.Health?.Status === "healthy") return true;
      if (!info.State.Running)
        exited = new Error(`${info.Name} exited (${info.State.ExitCode}) before healthy`);
      return exited !== undefined;
    },
    { intervalMs: 200, timeoutMs },
  );
  if (exited) throw exited;
  return Date.now() - start;
}

/** Removes every container, network and volume carrying all of the given labels. Idempotent. */
export async function removeLabelled(docker: Docker, labels: Record<string, string>): Promise<void> {
  const filters = JSON.stringify({ label: Object.entries(labels).map(([k, v]) => `${k}=${v}`) });
  const containers = await docker.listContainers({ all: true, filters });
  await Promise.all(containers.map((c) => docker.getContainer(c.Id).remove({ force: true, v: true })));
  for (const n of await docker.listNetworks({ filters })) await docker.getNetwork(n.Id).remove();
  for (const v of (await docker.listVolumes({ filters })).Volumes ?? [])
    await docker.getVolume(v.Name).remove();
}

/** Removes the images denv built for these projects (tagged denv-build/<project>-<service>:…). */
export async function removeBuiltImages(projectPrefixes: string[]): Promise<void> {
  const docker = new Docker();
  const images = await docker.listImages();
  for (const image of images) {
    const ours = (image.RepoTags ?? []).some((t) =>
      projectPrefixes.some((p) => t.startsWith(`denv-build/${p}`)),
    );
    if (ours)
      await docker
        .getImage(image.Id)
        .remove({ force: true })
        .catch(() => {});
  }
}
