/**
 * The sysctls a service may set: an allowlist of namespaced ones that change only the service's own
 * IPC or network namespace and cannot weaken isolation. Everything else is refused at resolve —
 * in particular every net.ipv6.* key (re-enabling IPv6 on a deny network would open a way out the
 * egress probe has to rule out), forwarding and per-interface settings, and anything not
 * namespaced, which would change the host itself.
 */
export const SAFE_SYSCTLS: ReadonlySet<string> = new Set([
  // IPC namespace (databases size their shared memory and queues with these)
  "kernel.msgmax",
  "kernel.msgmnb",
  "kernel.msgmni",
  "kernel.sem",
  "kernel.shmall",
  "kernel.shmmax",
  "kernel.shmmni",
  "kernel.shm_rmid_forced",
  "fs.mqueue.msg_max",
  "fs.mqueue.msgsize_max",
  "fs.mqueue.queues_max",
  "fs.mqueue.msg_default",
  "fs.mqueue.msgsize_default",
  // network namespace: socket tuning inside the service's own namespace
  "net.core.somaxconn",
  "net.ipv4.ip_local_port_range",
  "net.ipv4.ip_local_reserved_ports",
  "net.ipv4.ip_unprivileged_port_start",
  "net.ipv4.ping_group_range",
  "net.ipv4.tcp_syncookies",
  "net.ipv4.tcp_keepalive_time",
  "net.ipv4.tcp_keepalive_intvl",
  "net.ipv4.tcp_keepalive_probes",
  "net.ipv4.tcp_fin_timeout",
  "net.ipv4.tcp_tw_reuse",
  "net.ipv4.tcp_max_syn_backlog",
  "net.ipv4.tcp_rmem",
  "net.ipv4.tcp_wmem",
]);

/** Why a sysctl is refused, or null when it is on the allowlist. */
export function sysctlProblem(key: string): string | null {
  if (SAFE_SYSCTLS.has(key)) return null;
  if (key.startsWith("net.ipv6."))
    return `sysctl ${key} changes IPv6, which denv keeps off on deny networks; remove it`;
  return `sysctl ${key} is not on denv's allowlist (namespaced settings that cannot weaken isolation: kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*, net.core.somaxconn and TCP tuning); remove it`;
}
