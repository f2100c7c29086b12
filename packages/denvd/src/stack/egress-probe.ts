/**
 * The egress probe: from inside an environment's network namespace (entered from the host with
 * nsenter, so it needs nothing in the images), a TCP connect to a target on this machine, over
 * IPv4 and over IPv6. The IPv4 target is configurable; by default it is the network's own gateway
 * address, which is the host: with egress allow the host answers (connected, or refused), with
 * egress deny nothing answers. The IPv6 target is the host's link-local address on the network's
 * bridge (the address an internal network still shares with the host), on the same port.
 * Only targets on this machine are probed.
 *
 * Why not just read the route table: on Docker 20.10 an --internal network still gives containers
 * a default route, and the host's address on the bridge stays reachable; denvd therefore creates
 * deny networks with no host IPv4 address at all (inhibit_ipv4) and turns IPv6 off inside deny
 * containers (a bridge keeps its IPv6 link-local address), and this probe checks the result.
 */
import { readFile } from "node:fs/promises";
import { isIPv4 } from "node:net";
import { DenvError, type Egress6Evidence, type EgressEvidence } from "@denv/protocol";
import { type HostCommandResult, runHostCommand } from "../host/host-command.ts";

/**
 * How long a helper command (nsenter, ip) may take before it is killed: a safety net for one that
 * hangs, never the probe's own measure (the connects inside carry their own short timeouts). On a
 * machine busy with a fan-out, merely starting nsenter and bash has taken over 5 s.
 */
const COMMAND_TIMEOUT_MS = 60_000;

/**
 * The probes' bash runs with this environment, not denvd's. Bash reads root's ~/.bashrc when it is
 * not interactive but its stdin is a socket (as Node's child pipes are) and it is a top-level shell
 * (rshd's case): under systemd (SHLVL unset) every probe sourced the host's .bashrc, and on a host
 * whose .bashrc runs `pyenv init` with a stale lock, each waited 60 s. SHLVL=1 makes bash a nested
 * shell, so nothing is read; the PATH is the system's.
 */
const PROBE_ENV = {
  PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
  SHLVL: "1",
  LANG: "C",
};

export type { Egress6Evidence, EgressEvidence };

export interface EgressTarget {
  host: string;
  port: number;
}

type Outcome = EgressEvidence["outcome"];

/**
 * Blocked is proven two ways. At once, where the namespace's routes lead nowhere (`ip route get`
 * answers unreachable: no_route) or the kernel answers the connect itself (no route to host, network
 * unreachable). Otherwise by silence, and silence must outlast what a slow but reachable target
 * takes: a connect whose first SYN is lost (or sits in a full accept queue) is answered by the
 * kernel's retransmission one second later, so the wait is at least MIN_WAIT_MS, and
 * CONTROL_FACTOR times a connect to the namespace's own address on a machine so loaded that the
 * control itself is slow (up to MAX_WAIT_MS). A probe that cannot run is an error, never "blocked".
 */
export const MIN_WAIT_MS = 1500;
const MAX_WAIT_MS = 5000;
const CONTROL_FACTOR = 50;

/** A connect's end, from bash's exit status and message. */
function outcomeOf(r: HostCommandResult): Outcome {
  const { stderr } = r;
  if (r.exitCode === 0 && !r.timedOut) return "connected";
  if (r.exitCode === 7 && /denv-noroute/.test(stderr)) return "no_route";
  if (/refused/i.test(stderr)) return "refused";
  if (/No route to host|Network is unreachable/i.test(stderr)) return "unreachable";
  if (r.exitCode === 124 && !r.timedOut) return "timeout";
  throw new DenvError(
    "unavailable",
    `the egress probe could not run in the service's network namespace: ${
      stderr
        .replace(/denv-\S+[^\n]*\n?/g, "")
        .trim()
        .slice(0, 300) || (r.timedOut ? "it did not end in time" : `exit status ${r.exitCode}`)
    }`,
  );
}

/**
 * Removes the IPv4 default route of a container on a deny network. Its network is internal and the
 * host holds no address on it, so the route leads to a gateway nobody answers for; without it,
 * anything off the stack's subnets fails at once with "network unreachable", and the probe proves
 * blocked by the kernel's answer instead of by a second and a half of silence. Traffic between
 * the stack's services (on-link) and the engine's DNS (loopback) do not use it. Returns whether a
 * route was removed; a namespace without one is left as it is.
 */
export async function dropDefaultRoute(containerPid: number): Promise<boolean> {
  const r = await runHostCommand(
    "nsenter",
    [`--net=/proc/${containerPid}/ns/net`, "--", "ip", "-4", "route", "del", "default"],
    { timeoutMs: COMMAND_TIMEOUT_MS, env: PROBE_ENV },
  );
  if (r.exitCode === 0 && !r.timedOut) return true;
  // No default route, or no namespace any more (the container exited at once: its start's health
  // wait reports that): nothing to remove. A host without iproute2's `ip` (a minimal Debian with
  // Docker) keeps the route: its probe proves blocked by silence instead.
  if (/No such process|Cannot find|cannot open \/proc|failed to execute ip/i.test(r.stderr)) return false;
  throw new DenvError(
    "internal",
    `could not remove the default route: ${r.stderr.trim().slice(0, 300) || `exit status ${r.exitCode}`}`,
  );
}

/**
 * The default IPv4 target: this host's own address toward the world (the source address of its
 * route to 192.0.2.1, a documentation address: only the route table is read, nothing is sent),
 * which is off every stack's subnet, so a deny stack's missing route answers at once; an allow
 * stack reaches it through its gateway. Null on a host with no such route.
 */
export function hostAddress(): Promise<string | null> {
  // Read once for the probes of the next few seconds: a fan-out's forks would otherwise each
  // start `ip` (a process, ≈ 11 ms of denvd's CPU) for the same answer.
  const now = performance.now();
  if (!hostAddressRead || now - hostAddressRead.at > HOST_ADDRESS_TTL_MS)
    hostAddressRead = { at: now, address: readHostAddress() };
  return hostAddressRead.address;
}

const HOST_ADDRESS_TTL_MS = 5_000;
let hostAddressRead: { at: number; address: Promise<string | null> } | undefined;

async function readHostAddress(): Promise<string | null> {
  const r = await runHostCommand("ip", ["-4", "-o", "route", "get", "192.0.2.1"], {
    timeoutMs: COMMAND_TIMEOUT_MS,
    env: PROBE_ENV,
  }).catch(() => null);
  if (r?.exitCode !== 0 || r.timedOut) return null;
  return /\bsrc (\d+\.\d+\.\d+\.\d+)/.exec(r.stdout)?.[1] ?? null;
}

/**
 * The IPv4 addresses this host holds on a docker bridge network (br-<id>): a deny network has
 * none, so nothing on its link is the host. Null when there is no such bridge.
 */
export async function bridgeIpv4(networkId: string): Promise<string[] | null> {
  const r = await runHostCommand("ip", ["-4", "-o", "addr", "show", "dev", `br-${networkId.slice(0, 12)}`], {
    timeoutMs: COMMAND_TIMEOUT_MS,
    env: PROBE_ENV,
  }).catch(() => null);
  if (r?.exitCode !== 0 || r.timedOut) return null;
  return [...r.stdout.matchAll(/\binet (\d+\.\d+\.\d+\.\d+)/g)].map((m) => m[1] as string);
}

/** The host's IPv6 link-local address on a docker bridge network (br-<id>), if it has one. */
export async function bridgeLinkLocal(networkId: string): Promise<string | null> {
  const { readFile } = await import("node:fs/promises");
  const text = await readFile("/proc/net/if_inet6", "utf8").catch(() => "");
  const ifname = `br-${networkId.slice(0, 12)}`;
  for (const line of text.split("\n")) {
    const [hex, , , scope, , name] = line.trim().split(/\s+/);
    if (name === ifname && scope === "20" && hex?.length === 32)
      return (hex.match(/.{4}/g) as string[]).join(":").replace(/\b0+(?=[0-9a-f])/g, "");
  }
  return null;
}

/**
 * A namespace whose only interface is loopback, read from the host: `/proc/PID/net` is the
 * kernel's view of that process's namespace, which nothing inside it can write. With no device
 * but `lo` no packet can leave, whatever its routes say, so it is blocked without entering it
 * (no nsenter, bash or ip: an isolated sandbox's create started six processes for this answer).
 * Null when the namespace has any other interface, or cannot be read: the probes then run in it.
 * IPv6 is counted the same way: `disabled` here means the namespace holds no IPv6 address at all,
 * loopback's included (a deny container's `disable_ipv6` removes even `::1`).
 */
export async function loopbackOnly(
  containerPid: number,
  target: EgressTarget,
): Promise<EgressEvidence | null> {
  if (!Number.isInteger(containerPid) || containerPid <= 0) return null;
  const started = performance.now();
  const dir = `/proc/${containerPid}/net`;
  const read = (name: string) => readFile(`${dir}/${name}`, "utf8").catch(() => null);
  const [dev, inet6, route] = await Promise.all([read("dev"), read("if_inet6"), read("route")]);
  if (dev === null || inet6 === null || route === null) return null;
  const interfaces = interfacesOf(dev);
  if (interfaces.length !== 1 || interfaces[0] !== "lo") return null;
  const addresses6 = inet6
    .split("\n")
    .filter((l) => l.trim())
    .map((l) => l.trim().split(/\s+/)[5]);
  const routes4 = route
    .split("\n")
    .slice(1)
    .filter((l) => l.trim()).length;
  return {
    result: "blocked",
    target: `${target.host}:${target.port}`,
    outcome: "no_route",
    route: `no interface but lo (${dir}/dev); ${routes4} IPv4 routes`,
    ms: Math.round(performance.now() - started),
    interfaces,
    ipv6: {
      result: "blocked",
      target: "none",
      outcome: "unreachable",
      disabled: addresses6.length === 0,
      addresses: addresses6.filter((n) => n !== "lo").length,
    },
  };
}

/** The interface names of a `/proc/net/dev` table (two header lines, then `name: counters`). */
export function interfacesOf(dev: string): string[] {
  return dev
    .split("\n")
    .slice(2)
    .map((l) => l.split(":")[0]?.trim() ?? "")
    .filter((n) => n !== "");
}

export async function probeEgress(
  containerPid: number,
  target: EgressTarget,
  selfAddress?: string,
  linkLocal6?: string | null,
): Promise<EgressEvidence> {
  const started = performance.now();
  const [v4, v6] = await Promise.all([
    probe4(containerPid, target, selfAddress),
    probe6(containerPid, target.port, selfAddress, linkLocal6 ?? null),
  ]);
  return {
    ...v4,
    result: v4.result === "blocked" && v6.result === "blocked" ? "blocked" : "reachable",
    ms: Math.round(performance.now() - started),
    ipv6: v6,
  };
}

/** An IPv4 address as dotted digits, or null: nothing else goes into a probe's script. */
function ipv4(address: string | undefined | null): string | null {
  return address && isIPv4(address) ? address : null;
}

async function probe4(
  containerPid: number,
  target: EgressTarget,
  selfAddress?: string,
): Promise<Omit<EgressEvidence, "ms">> {
  const control = ipv4(selfAddress) ?? "127.0.0.1";
  const host = ipv4(target.host);
  if (!host || !Number.isInteger(target.port) || target.port < 1 || target.port > 65535)
    return Promise.reject(
      new DenvError(
        "invalid_argument",
        `the egress probe's target ${target.host}:${target.port} is not IPv4:port`,
      ),
    );
  // One bash in the namespace: the route to the target (none: blocked, no wait), the control
  // connect (port 9 on its own address: refused at once), then the target under a wait scaled
  // from it. EPOCHREALTIME is bash's µs clock; `ip` is the host's, run in the namespace. Bash's
  // own words do what small tools could (a process each costs more than the probe's reads).
  const script = [
    `r=$(ip -4 -o route get ${host} 2>&1)`,
    'echo "denv-route ${r:0:400}" >&2',
    'case "$r" in *unreachable*|*prohibit*|*blackhole*|*"No route"*) echo denv-noroute >&2; exit 7;; esac',
    "s=${EPOCHREALTIME/./}",
    `(exec 4<>/dev/tcp/${control}/9) 2>/dev/null`,
    "e=${EPOCHREALTIME/./}",
    "c=$((e-s))",
    `t=$((c*${CONTROL_FACTOR}))`,
    `[ $t -lt ${MIN_WAIT_MS * 1000} ] && t=${MIN_WAIT_MS * 1000}`,
    `[ $t -gt ${MAX_WAIT_MS * 1000} ] && t=${MAX_WAIT_MS * 1000}`,
    'echo "denv-probe $c $t" >&2',
    `exec timeout "$(printf '%d.%06d' $((t/1000000)) $((t%1000000)))" bash -c 'exec 3<>/dev/tcp/${host}/${target.port}'`,
  ].join("; ");
  const args = [`--net=/proc/${containerPid}/ns/net`, "--", "bash", "--norc", "--noprofile", "-c", script];
  const r = await runHostCommand("nsenter", args, {
    timeoutMs: MAX_WAIT_MS + COMMAND_TIMEOUT_MS,
    env: PROBE_ENV,
  });
  const m = /denv-probe (\d+) (\d+)/.exec(r.stderr);
  const route = /denv-route ([^\n]*)/.exec(r.stderr)?.[1]?.trim();
  const outcome = outcomeOf(r);
  return {
    result: outcome === "connected" || outcome === "refused" ? "reachable" : "blocked",
    target: `${target.host}:${target.port}`,
    outcome,
    ...(route ? { route } : {}),
    ...(m ? { control_us: Number(m[1]), wait_ms: Math.round(Number(m[2]) / 1000) } : {}),
  };
}

/**
 * IPv6 from the namespace: whether it is off, how many addresses it has beyond loopback, and a
 * connect to the host's link-local address on the bridge, through the interface that carries the
 * namespace's IPv4 address.
 */
async function probe6(
  containerPid: number,
  port: number,
  selfAddress: string | undefined,
  linkLocalRead: string | null,
): Promise<Egress6Evidence> {
  const linkLocal = linkLocalRead && /^[0-9a-f:]+$/.test(linkLocalRead) ? linkLocalRead : null;
  // Whether IPv6 is off, the addresses other than loopback's (/proc/net/if_inet6: the interface's
  // name is the sixth field), and the interface holding the namespace's IPv4 address (`ip -o`:
  // the name second, the address fourth), read by bash itself.
  const self = ipv4(selfAddress) ?? "none";
  const state = [
    "read -r d 2>/dev/null < /proc/sys/net/ipv6/conf/all/disable_ipv6 || d=1",
    'n=0; { while read -r _ _ _ _ _ name; do [ "$name" != lo ] && n=$((n+1)); done < /proc/net/if_inet6; } 2>/dev/null',
    `i=; while read -r _ name _ addr _; do [[ $addr == ${self}/* ]] && { i=$name; break; }; done < <(ip -o -4 addr show 2>/dev/null)`,
    'echo "denv-probe6 $d $n $i" >&2',
  ];
  const connect = linkLocal
    ? [`exec timeout 0.5 bash -c "exec 3<>/dev/tcp/${linkLocal}%\${i:-eth0}/${port}"`]
    : ["exit 3"];
  const args = [
    `--net=/proc/${containerPid}/ns/net`,
    "--",
    "bash",
    "--norc",
    "--noprofile",
    "-c",
    [...state, ...connect].join("; "),
  ];
  const r = await runHostCommand("nsenter", args, { timeoutMs: COMMAND_TIMEOUT_MS, env: PROBE_ENV });
  const { stderr } = r;
  const m = /denv-probe6 (\d+) (\d+) ?(\S*)/.exec(stderr);
  // No state read: the probe did not run, which proves nothing (never "blocked").
  if (!m)
    throw new DenvError(
      "unavailable",
      `the IPv6 egress probe could not run in the service's network namespace: ${stderr.trim().slice(0, 300) || (r.timedOut ? "it did not end in time" : `exit status ${r.exitCode}`)}`,
    );
  const disabled = m[1] === "1";
  const addresses = Number(m[2]);
  // With no IPv6 address the connect fails whatever its error (no source address to send from);
  // the addresses, not this error, are the proof.
  const ok = r.exitCode === 0 && !r.timedOut;
  const outcome: Outcome = !linkLocal
    ? "unreachable"
    : ok
      ? "connected"
      : /refused/i.test(stderr)
        ? "refused"
        : r.exitCode === 124 && !r.timedOut
          ? "timeout"
          : "unreachable";
  const ifname = m?.[3] || "eth0";
  // An IPv6 address on an interface (even one still in duplicate address detection, whose connect
  // fails for a second or two) is a way to the host on the same link: only a namespace with none
  // is blocked, whatever one connect saw.
  return {
    result: outcome === "connected" || outcome === "refused" || addresses > 0 ? "reachable" : "blocked",
    target: linkLocal ? `[${linkLocal}%${ifname}]:${port}` : "none",
    outcome,
    disabled,
    addresses,
  };
}
