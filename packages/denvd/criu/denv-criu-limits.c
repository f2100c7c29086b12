/*
 * denv-criu-limits.so: preloaded into CRIU (by the `criu` wrapper scripts/ensure-criu.sh writes) so
 * that CRIU can read the resource limits of a process that runs as another user on a host whose
 * root lacks CAP_SYS_RESOURCE (a VM's or container's bounding set, these development machines
 * among them).
 *
 * CRIU's dump reads each task's limits with prlimit64(pid, res, NULL, &old), which the kernel
 * allows on another user's process only with CAP_SYS_RESOURCE, so without it every service that
 * drops to its own user (PostgreSQL, Redis, an agent's sandbox) could not be checkpointed. The
 * same values are in /proc/PID/limits, readable by root: where the system call is refused with
 * EPERM for a read (no new limits), they are read from there. Nothing is ever set or widened here;
 * every other system call, and every prlimit64 the kernel allows, goes through untouched.
 *
 * CRIU calls it through glibc's syscall(), which is what this interposes.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>

typedef long (*syscall_fn)(long, ...);

/* "unlimited" or a decimal number, nothing else. */
static int limit_value(const char *s, rlim64_t *v) {
  if (strcmp(s, "unlimited") == 0) {
    *v = RLIM64_INFINITY;
    return 0;
  }
  if (*s < '0' || *s > '9') return -1;
  char *end;
  errno = 0;
  unsigned long long n = strtoull(s, &end, 10);
  if (errno || *end) return -1;
  *v = n;
  return 0;
}

/*
 * /proc/PID/limits: a header line, then one line per resource in the kernel's order (RLIMIT_CPU
 * first), each a 25-column name, then the soft and the hard limit.
 */
static int limits_from_proc(pid_t pid, long resource, struct rlimit64 *old) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/limits", (int)pid);
  FILE *f = fopen(path, "re");
  if (!f) return -1;
  char line[256];
  long row = -2;
  int ok = -1;
  while (fgets(line, sizeof line, f)) {
    if (++row != resource) continue;
    char soft[24], hard[24];
    struct rlimit64 lim;
    if (strlen(line) > 26 && sscanf(line + 26, "%23s %23s", soft, hard) == 2 &&
        limit_value(soft, &lim.rlim_cur) == 0 && limit_value(hard, &lim.rlim_max) == 0) {
      *old = lim;
      ok = 0;
    }
    break;
  }
  fclose(f);
  return ok;
}

long syscall(long number, ...) {
  static syscall_fn real;
  if (!real) real = (syscall_fn)dlsym(RTLD_NEXT, "syscall");
  /* glibc's own syscall() takes six register-sized arguments whatever the call. */
  va_list ap;
  va_start(ap, number);
  long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long);
  long d = va_arg(ap, long), e = va_arg(ap, long), g = va_arg(ap, long);
  va_end(ap);
  long r = real(number, a, b, c, d, e, g);
  if (number != SYS_prlimit64 || r == 0 || errno != EPERM) return r;
  /* Only a read of another process's limits: pid given, no new limits, somewhere to put them. */
  if (a <= 0 || c != 0 || d == 0 || b < 0 || b >= RLIM_NLIMITS) return r;
  if (limits_from_proc((pid_t)a, b, (struct rlimit64 *)d) != 0) {
    errno = EPERM;
    return -1;
  }
  return 0;
}
