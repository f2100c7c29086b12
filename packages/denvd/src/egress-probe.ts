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
}

/** A local answer takes well under a millisecond; silence past this means nothing is there. */
const CONNECT_TIMEOUT_S = 0.25;

export function probeEgress(containerPid: number, target: EgressTarget): Promise<EgressEvidence> {
  const started = performance.now();
  const args = [
    `--net=/proc/${containerPid}/ns/net`,
    "--",
    "timeout",
    String(CONNECT_TIMEOUT_S),
    "bash",
    "-c",
    `exec 3<>/dev/tcp/${target.host}/${target.port}`,
  ];
  return new Promise((resolve) => {
    execFile("nsenter", args, { encoding: "utf8", timeout: 5000 }, (err, _stdout, stderr) => {
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
      });
    });
  });
}
