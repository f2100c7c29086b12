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
import { execFile } from "node:child_process";
import type { Egress6Evidence, EgressEvidence } from "@denv/protocol";

export type { Egress6Evidence, EgressEvidence };

export interface EgressTarget {
  host: string;
  port: number;
}

type Outcome = EgressEvidence["outcome"];

/**
 * Silence from the target counts as blocked only after it lasts MIN_WAIT_MS, and at least
 * CONTROL_FACTOR times what a connect to the namespace's own address took just before (its local
 * round trip): a local peer answers a SYN in well under a millisecond, so 100 ms is a margin of
 * hundreds; on a machine so loaded that the control itself is slow, the wait grows with it
 * (up to MAX_WAIT_MS) rather than mistaking a slow answer for none.
 */
const MIN_WAIT_MS = 100;
const MAX_WAIT_MS = 1000;
const CONTROL_FACTOR = 50;

function outcomeOf(err: (Error & { code?: number | string | null }) | null, stderr: string): Outcome {
  if (!err) return "connected";
  if (/refused/i.test(stderr)) return "refused";
  return err.code === 124 ? "timeout" : "unreachable";
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

function probe4(
  containerPid: number,
  target: EgressTarget,
  selfAddress?: string,
): Promise<Omit<EgressEvidence, "ms">> {
  const control = selfAddress ?? "127.0.0.1";
  // One bash in the namespace: the control connect (port 9 on its own address: refused at once),
  // then the target under a wait scaled from it. EPOCHREALTIME is bash's µs clock.
  const script = [
    "s=${EPOCHREALTIME/./}",
    `(exec 4<>/dev/tcp/${control}/9) 2>/dev/null`,
    "e=${EPOCHREALTIME/./}",
    "c=$((e-s))",
    `t=$((c*${CONTROL_FACTOR}))`,
    `[ $t -lt ${MIN_WAIT_MS * 1000} ] && t=${MIN_WAIT_MS * 1000}`,
    `[ $t -gt ${MAX_WAIT_MS * 1000} ] && t=${MAX_WAIT_MS * 1000}`,
    'echo "denv-probe $c $t" >&2',
    `exec timeout "$(printf '%d.%06d' $((t/1000000)) $((t%1000000)))" bash -c 'exec 3<>/dev/tcp/${target.host}/${target.port}'`,
  ].join("; ");
  const args = [`--net=/proc/${containerPid}/ns/net`, "--", "bash", "-c", script];
  return new Promise((resolve) => {
    execFile("nsenter", args, { encoding: "utf8", timeout: 5000 }, (err, _stdout, stderr) => {
      const m = /denv-probe (\d+) (\d+)/.exec(stderr);
      const outcome = outcomeOf(err, stderr);
      resolve({
        result: outcome === "connected" || outcome === "refused" ? "reachable" : "blocked",
        target: `${target.host}:${target.port}`,
        outcome,
        ...(m ? { control_us: Number(m[1]), wait_ms: Math.round(Number(m[2]) / 1000) } : {}),
      });
    });
  });
}

/**
 * IPv6 from the namespace: whether it is off, how many addresses it has beyond loopback, and a
 * connect to the host's link-local address on the bridge, through the interface that carries the
 * namespace's IPv4 address.
 */
function probe6(
  containerPid: number,
  port: number,
  selfAddress: string | undefined,
  linkLocal: string | null,
): Promise<Egress6Evidence> {
  const state = [
    "d=$(cat /proc/sys/net/ipv6/conf/all/disable_ipv6 2>/dev/null || echo 1)",
    "n=$(awk '$6 != \"lo\"' /proc/net/if_inet6 2>/dev/null | wc -l)",
    `i=$(ip -o -4 addr show 2>/dev/null | awk '$4 ~ /^${(selfAddress ?? "none").replace(/\./g, "\\.")}\\// {print $2; exit}')`,
    'echo "denv-probe6 $d $n $i" >&2',
  ];
  const connect = linkLocal
    ? [`exec timeout 0.5 bash -c "exec 3<>/dev/tcp/${linkLocal}%\${i:-eth0}/${port}"`]
    : ["exit 3"];
  const args = [`--net=/proc/${containerPid}/ns/net`, "--", "bash", "-c", [...state, ...connect].join("; ")];
  return new Promise((resolve) => {
    execFile("nsenter", args, { encoding: "utf8", timeout: 5000 }, (err, _stdout, stderr) => {
      const m = /denv-probe6 (\d+) (\d+) ?(\S*)/.exec(stderr);
      const disabled = m ? m[1] === "1" : true;
      const addresses = m ? Number(m[2]) : 0;
      const outcome: Outcome = linkLocal ? outcomeOf(err, stderr) : "unreachable";
      const ifname = m?.[3] || "eth0";
      // An IPv6 address on an interface (even one still in duplicate address detection, whose
      // connect fails for a second or two) is a way to the host on the same link: only a namespace
      // with none is blocked, whatever one connect saw.
      resolve({
        result: outcome === "connected" || outcome === "refused" || addresses > 0 ? "reachable" : "blocked",
        target: linkLocal ? `[${linkLocal}%${ifname}]:${port}` : "none",
        outcome,
        disabled,
        addresses,
      });
    });
  });
}
