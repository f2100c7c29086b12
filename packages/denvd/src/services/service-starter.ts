/**
 * The processes that stand where a service's process will be before it is the service: the
 * engine's container init (`runc init`, root, until it execs the entrypoint: the container's pid is
 * already known while it waits) and denv's agent in init mode (root, until it drops to the service's
 * user and execs the command). A uid read from either says nothing about the service's user.
 */
import { basename } from "node:path";
import { AGENT_BIN } from "../stack/container-spec.ts";

/** Whether a process's argv (its /proc cmdline split on NUL) is one of the starters, not the service. */
export function isServiceStarter(argv: readonly string[]): boolean {
  const [argv0 = "", argv1] = argv;
  if (argv0 === AGENT_BIN) return true;
  return basename(argv0) === "runc" && argv1 === "init";
}

/**
 * The same engine init told by its executable's link, for readers that look at /proc/PID/exe:
 * runc clones itself before it runs, so its path reads as "/" or a memfd.
 */
export const isRuntimeInit = (exe: string) => exe === "/" || /memfd:|runc/.test(exe);
