/**
 * Capabilities the engine grants by default that denv drops from every container (raw sockets,
 * device nodes, chroot, file capabilities, audit writes): a service may ask for these back with
 * cap_add, and for nothing else. A module of its own so denvd reads it without loading the
 * compose normaliser.
 */
export const RESTORABLE_CAPS: readonly string[] = [
  "NET_RAW",
  "MKNOD",
  "SYS_CHROOT",
  "SETFCAP",
  "AUDIT_WRITE",
];
