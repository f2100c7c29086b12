/**
 * Fresh Debian machines for the tests, made here: a container of test/images/dind-host running its
 * own Docker engine (nothing of denv in it). They sit on a test network whose gateway is this
 * machine, where the test's server listens; 127.0.0.1:5000 inside reaches the local registry
 * through a forwarder, so the pinned image references of the stacks resolve as they do here.
 *
 * This machine's engine cannot run --privileged containers (its bounding set lacks
 * CAP_SYS_RESOURCE), so the containers get every capability it does have, unconfined seccomp,
 * AppArmor and /proc, and the host's cgroup tree: enough for dockerd to run containers inside.
 */
import { randomBytes } from "node:crypto";
import { connect, createServer, type Server } from "node:net";
import Docker from "dockerode";
import { type ExecResult, execIn } from "./engine.ts";

export const DIND_IMAGE = "127.0.0.1:5000/denv/test-dind-host:bookworm";
/** The same machine booting systemd as PID 1, with Docker as a systemd service. */
export const SYSTEMD_IMAGE = "127.0.0.1:5000/denv/test-systemd-host:bookworm";

const CAPS = [
  "CHOWN",
  "DAC_OVERRIDE",
  "DAC_READ_SEARCH",
  "FOWNER",
  "FSETID",
  "KILL",
  "SETGID",
  "SETUID",
  "SETPCAP",
  "LINUX_IMMUTABLE",
  "NET_BIND_SERVICE",
  "NET_BROADCAST",
  "NET_ADMIN",
  "NET_RAW",
  "IPC_LOCK",
  "IPC_OWNER",
  "SYS_MODULE",
  "SYS_RAWIO",
  "SYS_CHROOT",
  "SYS_PTRACE",
  "SYS_PACCT",
  "SYS_ADMIN",
  "SYS_BOOT",
  "SYS_NICE",
  "SYS_TIME",
  "SYS_TTY_CONFIG",
  "MKNOD",
  "LEASE",
  "AUDIT_WRITE",
  "AUDIT_CONTROL",
  "SETFCAP",
  "MAC_OVERRIDE",
  "MAC_ADMIN",
  "SYSLOG",
  "WAKE_ALARM",
  "BLOCK_SUSPEND",
  "AUDIT_READ",
];

export interface Lab {
  runId: string;
  docker: Docker;
  network: string;
  /** This machine's address on the lab network: where servers for fresh hosts listen. */
  gateway: string;
  /** Where 127.0.0.1:5000 inside a fresh host is forwarded to. */
  registryForward: string;
  close(): Promise<void>;
}

export interface FreshHost {
  name: string;
  container: Docker.Container;
  sh(script: string): Promise<ExecResult>;
  remove(): Promise<void>;
}

export async function openLab(): Promise<Lab> {
  const docker = new Docker();
  const runId = `lab-${randomBytes(4).toString("hex")}`;
  const labels = { "dev.denv.test": runId };
  const net = await docker.createNetwork({ Name: runId, Driver: "bridge", Labels: labels });
  const info = await net.inspect();
  const gateway = info.IPAM?.Config?.[0]?.Gateway as string;
  if (!gateway) throw new Error("the lab network has no gateway address");
  // 127.0.0.1:5000 (the registry) is not reachable from containers: forward it on the gateway.
  const forwarder: Server = createServer((c) => {
    const u = connect(5000, "127.0.0.1");
    c.pipe(u).pipe(c);
    c.on("error", () => u.destroy());
    u.on("error", () => c.destroy());
  });
  await new Promise<void>((r) => forwarder.listen(0, gateway, r));
  const port = (forwarder.address() as { port: number }).port;
  return {
    runId,
    docker,
    network: runId,
    gateway,
    registryForward: `${gateway}:${port}`,
    async close() {
      forwarder.close();
      const cs = await docker.listContainers({ all: true, filters: { label: [`dev.denv.test=${runId}`] } });
      await Promise.all(
        cs.map((c) =>
          docker
            .getContainer(c.Id)
            .remove({ force: true, v: true })
            .catch(() => {}),
        ),
      );
      const vs = await docker.listVolumes({ filters: { label: [`dev.denv.test=${runId}`] } });
      await Promise.all(
        (vs.Volumes ?? []).map((v) =>
          docker
            .getVolume(v.Name)
            .remove()
            .catch(() => {}),
        ),
      );
      await net.remove().catch(() => {});
    },
  };
}

/** Boots a fresh host; `userData` runs at boot the way cloud-init runs a shell-script user data. */
export async function bootFreshHost(
  lab: Lab,
  options: {
    name?: string;
    userData?: string;
    docker?: boolean;
    image?: string;
    systemd?: boolean;
    /** More of this machine's directories in it ("SRC:DEST"): a storage pool handed to the host. */
    binds?: string[];
  } = {},
): Promise<FreshHost> {
  const name = options.name ?? `${lab.runId}-${randomBytes(3).toString("hex")}`;
  const labels = { "dev.denv.test": lab.runId };
  const withDocker = options.docker ?? true;
  const image = options.systemd ? SYSTEMD_IMAGE : (options.image ?? DIND_IMAGE);
  const volume = `${name}-docker`;
  await lab.docker.createVolume({ Name: volume, Labels: labels });
  const container = await lab.docker.createContainer({
    name,
    Image: image,
    Hostname: name,
    Labels: labels,
    Env: [`REGISTRY_FORWARD=${lab.registryForward}`, `START_DOCKER=${withDocker ? 1 : 0}`],
    ...(image === DIND_IMAGE || image === SYSTEMD_IMAGE ? {} : { Entrypoint: ["sleep", "infinity"] }),
    HostConfig: {
      // An init that reaps orphans, as a machine's PID 1 does (boot.sh ends in `sleep infinity`);
      // the systemd machine has its own, which wants /run and /run/lock on tmpfs.
      ...(image === SYSTEMD_IMAGE ? { Tmpfs: { "/run": "", "/run/lock": "" } } : { Init: true }),
      CapAdd: CAPS,
      SecurityOpt: ["seccomp=unconfined", "apparmor=unconfined"],
      // The API's form of --security-opt systempaths=unconfined: /proc and /sys unmasked.
      MaskedPaths: [],
      ReadonlyPaths: [],
      Binds: [`${volume}:/var/lib/docker`, "/sys/fs/cgroup:/sys/fs/cgroup:rw", ...(options.binds ?? [])],
      NetworkMode: lab.network,
    },
  });
  if (image === SYSTEMD_IMAGE) {
    // systemd starts the registry forwarder at boot when this file is there.
    const { pack } = await import("tar-stream");
    const p = pack();
    p.entry({ name: "registry-forward", mode: 0o644 }, `REGISTRY_FORWARD=${lab.registryForward}\n`);
    p.finalize();
    await container.putArchive(p as unknown as NodeJS.ReadableStream, { path: "/etc/default" });
  }
  const userData = options.userData;
  if (userData !== undefined) {
    // cloud-init's place for it; boot.sh runs it once the engine is up.
    const { pack } = await import("tar-stream");
    const p = pack();
    p.entry({ name: "user-data", mode: 0o600 }, userData);
    p.finalize();
    await container
      .putArchive(p as unknown as NodeJS.ReadableStream, { path: "/var/lib/cloud" })
      .catch(async () => {
        // The directory does not exist in the image yet: create the parent in the archive.
        const q = pack();
        q.entry({ name: "cloud", type: "directory", mode: 0o755 });
        q.entry({ name: "cloud/user-data", mode: 0o600 }, userData);
        q.finalize();
        await container.putArchive(q as unknown as NodeJS.ReadableStream, { path: "/var/lib" });
      });
  }
  await container.start();
  const host: FreshHost = {
    name,
    container,
    sh: (script: string) => execIn(container, ["sh", "-c", script]),
    remove: () => container.remove({ force: true, v: true }).catch(() => {}),
  };
  if (image === DIND_IMAGE || image === SYSTEMD_IMAGE) {
    const booted =
      image === SYSTEMD_IMAGE
        ? "systemctl is-system-running | grep -Eq '^(running|degraded)$' && docker info >/dev/null 2>&1"
        : "test -f /var/run/booted";
    for (let i = 0; i < 150; i++) {
      if ((await host.sh(booted)).exitCode === 0) return host;
      const st = await container.inspect();
      if (!st.State.Running) throw new Error(`fresh host ${name} stopped while booting`);
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new Error(`fresh host ${name} did not boot`);
  }
  return host;
}
