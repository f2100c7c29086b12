/**
 * The egress probe: from inside an environment's network namespace (entered from the host with
 * nsenter, so it needs nothing in the images), a TCP connect to a target on this machine. The
 * target is configurable; by default it is the network's own gateway address, which is the host:
 * with egress allow the host answers (connected, or refused), with egress deny nothing answers.
 * Only targets on this machine are probed.
 *
 * Why not just read the route table: on Docker 20.10 an --internal network still gives containers
 * a default route, and the host's address on the bridge stays reachable; denvd therefore creates
 * deny networks with no host address at all (inhibit_ipv4), and this probe checks the result.
 */
import { execFile } from "node:child_process";

export interface EgressTarget {
  host: string;
  port: number;
}

export interface EgressEvidence {
  result: "blocked" | "reachable";
  target: string;
  /** What the connect saw: connected, refused (something answered), or the error that blocked it. */
  outcome: "connected" | "refused" | "timeout" | "unreachable";
  ms: number;
  /** The service whose network namespace the probe ran in. */
  from?: string;
  /** How long a connect to the namespace's own address took (the local round trip), in µs. */
  control_us?: number;
  /** How long silence from the target had to last to count as blocked, in ms. */
  wait_ms?: number;
}

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

export function probeEgress(
  containerPid: number,
  target: EgressTarget,
  selfAddress?: string,
): Promise<EgressEvidence> {
  const started = performance.now();
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
      const outcome: EgressEvidence["outcome"] = !err
        ? "connected"
        : /refused/i.test(stderr)
          ? "refused"
          : (err as { code?: number }).code === 124
            ? "timeout"
            : "unreachable";
      resolve({
        result: outcome === "connected" || outcome === "refused" ? "reachable" : "blocked",
        target: `${target.host}:${target.port}`,
        outcome,
        ms: Math.round(performance.now() - started),
        ...(m ? { control_us: Number(m[1]), wait_ms: Math.round(Number(m[2]) / 1000) } : {}),
      });
    });
  });
}
