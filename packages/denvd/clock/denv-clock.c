/*
 * libdenv-clock.so: the wall clock of a stack with x-denv.clock: frozen.
 *
 * denvd mounts a directory read-only at /.denv/clock in every container of such a stack: this
 * library and `state`, a 64-byte record denvd writes (clock-state.ts). Every process loads the
 * library, through /etc/ld.so.preload (glibc: it survives programs that clear their environment
 * and setuid programs, which drop LD_PRELOAD) and LD_PRELOAD (musl, which has no preload file).
 *
 * The wall clock it reports: the record's base time while the record is held (a fork starting and
 * being health-checked), then base + the whole ticks of CLOCK_MONOTONIC elapsed since the record's
 * epoch. CLOCK_MONOTONIC is the host's in every container, so every process of every service of
 * a stack reads the same clock, and two forks of a version read the same values at the same
 * whole-tick offsets from their hand-over: sub-tick jitter between forks does not show.
 *
 * It links no C library (raw system calls, -nostdlib): it loads into any glibc, old or new, and
 * into musl, and it cannot disturb the program's own libc. Two symbols are taken from the program's
 * libc when it has them, weakly: __errno_location (to set errno) and getauxval (to find the vDSO,
 * so a clock read makes no system call). Statically linked programs never load it;
 * clock-reach.ts finds them and says so.
 */
#include <elf.h>
#include <stdint.h>
#include <sys/syscall.h>

/*
 * Our own declarations of what the C library's headers declare (with nonnull attributes that
 * would let the compiler drop the NULL checks a program may rely on): both supported ABIs are LP64.
 */
typedef int clockid_t;
typedef long time_t;
struct timespec {
  long tv_sec;
  long tv_nsec;
};
struct timeval {
  long tv_sec;
  long tv_usec;
};
#define CLOCK_REALTIME 0
#define CLOCK_MONOTONIC 1
#define CLOCK_REALTIME_COARSE 5
#define CLOCK_REALTIME_ALARM 8
#define CLOCK_TAI 11
#define TIMER_ABSTIME 1
#define TIME_UTC 1
#define AT_FDCWD (-100)
#define O_RDONLY 0
#define O_CLOEXEC 02000000
#define PROT_READ 1
#define MAP_SHARED 1
#define ENOENT 2

#define EXPORT __attribute__((visibility("default")))
#define STATE_PATH "/.denv/clock/state"
#define MAGIC 0x314b4c43564e4544ULL /* "DENVCLK1", little-endian */

struct clock_state {
  uint64_t magic;
  int64_t base_ns;  /* the wall clock at the epoch (ns since 1970) */
  int64_t epoch_ns; /* CLOCK_MONOTONIC when the clock started to advance; 0: held at base */
  int64_t tick_ns;  /* the clock advances in whole ticks */
  /* A sequence lock: odd while denvd rewrites base and epoch (each write its own system call, in
   * order); a reader that saw it odd, or changed under it, reads again. */
  uint64_t seq;
  uint64_t reserved[3];
};

/* errno lives in the program's libc; found at load time when there is one (glibc and musl both). */
extern int *__errno_location(void) __attribute__((weak));

static long raw_syscall6(long n, long a, long b, long c, long d, long e, long f) {
#if defined(__x86_64__)
  long ret;
  register long r10 __asm__("r10") = d;
  register long r8 __asm__("r8") = e;
  register long r9 __asm__("r9") = f;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
#elif defined(__aarch64__)
  register long x8 __asm__("x8") = n;
  register long x0 __asm__("x0") = a;
  register long x1 __asm__("x1") = b;
  register long x2 __asm__("x2") = c;
  register long x3 __asm__("x3") = d;
  register long x4 __asm__("x4") = e;
  register long x5 __asm__("x5") = f;
  __asm__ volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
  return x0;
#else
#error "denv-clock supports x86_64 and aarch64"
#endif
}

static long raw_syscall(long n, long a, long b, long c, long d) { return raw_syscall6(n, a, b, c, d, 0, 0); }

static long sys_ret(long r) {
  if (r < 0 && r > -4096) {
    if (__errno_location) *__errno_location() = (int)-r;
    return -1;
  }
  return r;
}

/*
 * The kernel's own clock_gettime in the vDSO, found through the program's libc (getauxval, in glibc
 * and musl): a clock read without a system call. Without it (no libc, an odd vDSO) the system call
 * serves, only slower.
 */
extern unsigned long getauxval(unsigned long) __attribute__((weak));
#define AT_SYSINFO_EHDR 33
#if defined(__x86_64__)
#define VDSO_GETTIME "__vdso_clock_gettime"
#else
#define VDSO_GETTIME "__kernel_clock_gettime"
#endif
typedef long (*vdso_gettime_fn)(long, struct timespec *);
static vdso_gettime_fn volatile vdso_gettime;
static volatile int vdso_looked;

static int same_name(const char *a, const char *b) {
  while (*a && *a == *b) a++, b++;
  return *a == *b;
}

static vdso_gettime_fn vdso_lookup(void) {
  if (!getauxval) return 0;
  uintptr_t base = getauxval(AT_SYSINFO_EHDR);
  if (!base) return 0;
  const Elf64_Ehdr *eh = (const Elf64_Ehdr *)base;
  if (eh->e_ident[EI_MAG0] != ELFMAG0 || eh->e_ident[EI_MAG1] != ELFMAG1 || eh->e_ident[EI_CLASS] != ELFCLASS64)
    return 0;
  const Elf64_Phdr *ph = (const Elf64_Phdr *)(base + eh->e_phoff);
  uintptr_t load = 0;
  int loaded = 0;
  const Elf64_Dyn *dyn = 0;
  for (int i = 0; i < eh->e_phnum; i++) {
    if (ph[i].p_type == PT_LOAD && !loaded) {
      load = base + ph[i].p_offset - ph[i].p_vaddr;
      loaded = 1;
    } else if (ph[i].p_type == PT_DYNAMIC) {
      dyn = (const Elf64_Dyn *)(base + ph[i].p_offset);
    }
  }
  if (!loaded || !dyn) return 0;
  const Elf64_Sym *syms = 0;
  const char *names = 0;
  const uint32_t *hash = 0, *gnu = 0;
  for (; dyn->d_tag != DT_NULL; dyn++) {
    if (dyn->d_tag == DT_SYMTAB) syms = (const Elf64_Sym *)(load + dyn->d_un.d_ptr);
    else if (dyn->d_tag == DT_STRTAB) names = (const char *)(load + dyn->d_un.d_ptr);
    else if (dyn->d_tag == DT_HASH) hash = (const uint32_t *)(load + dyn->d_un.d_ptr);
    else if (dyn->d_tag == DT_GNU_HASH) gnu = (const uint32_t *)(load + dyn->d_un.d_ptr);
  }
  if (!syms || !names) return 0;
  uint32_t count = 0;
  if (hash) {
    count = hash[1]; /* nchain: one per symbol */
  } else if (gnu) {
    /* The highest symbol a bucket names, then its chain to the end marker. */
    uint32_t nbuckets = gnu[0], symoffset = gnu[1], bloom = gnu[2];
    const uint32_t *buckets = gnu + 4 + bloom * 2; /* 64-bit bloom words */
    const uint32_t *chains = buckets + nbuckets;
    for (uint32_t b = 0; b < nbuckets; b++)
      if (buckets[b] > count) count = buckets[b];
    if (count >= symoffset)
      while (!(chains[count - symoffset] & 1)) count++;
    count++;
  }
  if (count == 0 || count > 4096) return 0;
  for (uint32_t i = 0; i < count; i++) {
    const Elf64_Sym *sym = &syms[i];
    if (ELF64_ST_TYPE(sym->st_info) != STT_FUNC || sym->st_shndx == SHN_UNDEF) continue;
    if (same_name(names + sym->st_name, VDSO_GETTIME)) return (vdso_gettime_fn)(load + sym->st_value);
  }
  return 0;
}

/* clock_gettime as the kernel answers it: the vDSO when there is one, the system call otherwise. */
static long kernel_gettime(long id, struct timespec *ts) {
  if (!vdso_looked) {
    vdso_gettime = vdso_lookup();
    vdso_looked = 1;
  }
  vdso_gettime_fn f = vdso_gettime;
  if (f) return f(id, ts);
  return raw_syscall(SYS_clock_gettime, id, (long)ts, 0, 0);
}

/* NULL: not looked up yet; &none_state: this process has no frozen clock (the real one is reported). */
static const struct clock_state *volatile state_ptr;
static const struct clock_state none_state = {0};

static const struct clock_state *state(void) {
  const struct clock_state *s = state_ptr;
  if (s) return s;
  const struct clock_state *found = &none_state;
  long fd = raw_syscall(SYS_openat, AT_FDCWD, (long)STATE_PATH, O_RDONLY | O_CLOEXEC, 0);
  /* Only "no such file" settles it (no frozen clock here); out of descriptors or memory, this call
   * reads the real clock and the next one looks again, so a process is never left real for good. */
  if (fd < 0 && fd != -ENOENT) return &none_state;
  if (fd >= 0) {
    long m = raw_syscall6(SYS_mmap, 0, 4096, PROT_READ, MAP_SHARED, fd, 0);
    raw_syscall(SYS_close, fd, 0, 0, 0);
    if (m < 0 && m > -4096) return &none_state;
    const struct clock_state *mapped = (const struct clock_state *)m;
    if (mapped->magic == MAGIC && mapped->tick_ns > 0) found = mapped;
    else raw_syscall(SYS_munmap, m, 4096, 0, 0);
  }
  /* Two threads may both look; either answer is the same file. */
  state_ptr = found;
  return found;
}

static int is_realtime(clockid_t id) {
  return id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE || id == CLOCK_REALTIME_ALARM ||
         id == CLOCK_TAI;
}

/* The frozen wall clock in ns, or -1 when this process reports the real one. */
static int64_t frozen_ns(void) {
  const struct clock_state *s = state();
  if (s->magic != MAGIC) return -1;
  int64_t base, epoch, tick;
  for (;;) {
    uint64_t before = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
    base = __atomic_load_n(&s->base_ns, __ATOMIC_RELAXED);
    epoch = __atomic_load_n(&s->epoch_ns, __ATOMIC_RELAXED);
    tick = __atomic_load_n(&s->tick_ns, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (!(before & 1) && __atomic_load_n(&s->seq, __ATOMIC_RELAXED) == before) break;
    raw_syscall(SYS_sched_yield, 0, 0, 0, 0);
  }
  if (tick <= 0) tick = 1000000000LL;
  if (epoch == 0) return base;
  struct timespec mono;
  if (kernel_gettime(CLOCK_MONOTONIC, &mono) != 0) return base;
  int64_t elapsed = (int64_t)mono.tv_sec * 1000000000LL + mono.tv_nsec - epoch;
  if (elapsed < 0) elapsed = 0;
  return base + elapsed - elapsed % tick;
}

static int64_t real_ns(clockid_t id) {
  struct timespec ts;
  if (kernel_gettime(id, &ts) != 0) return 0;
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int denv_clock_gettime(clockid_t id, struct timespec *ts) {
  if (is_realtime(id)) {
    int64_t f = frozen_ns();
    if (f >= 0) {
      /* TAI keeps its offset from UTC (leap seconds) */
      if (id == CLOCK_TAI) f += real_ns(CLOCK_TAI) - real_ns(CLOCK_REALTIME);
      ts->tv_sec = f / 1000000000LL;
      ts->tv_nsec = f % 1000000000LL;
      return 0;
    }
  }
  return (int)sys_ret(kernel_gettime(id, ts));
}

EXPORT int clock_gettime(clockid_t id, struct timespec *ts) { return denv_clock_gettime(id, ts); }

EXPORT int gettimeofday(struct timeval *tv, void *tz) {
  int64_t f = frozen_ns();
  if (f < 0 || tz) {
    long r = sys_ret(raw_syscall(SYS_gettimeofday, (long)tv, (long)tz, 0, 0));
    if (r != 0 || f < 0) return (int)r;
  }
  if (tv) {
    tv->tv_sec = f / 1000000000LL;
    tv->tv_usec = (f % 1000000000LL) / 1000;
  }
  return 0;
}

EXPORT time_t time(time_t *t) {
  int64_t f = frozen_ns();
  time_t now = f >= 0 ? (time_t)(f / 1000000000LL) : (time_t)(real_ns(CLOCK_REALTIME) / 1000000000LL);
  if (t) *t = now;
  return now;
}

EXPORT int timespec_get(struct timespec *ts, int base) {
  if (base != TIME_UTC) return 0;
  return denv_clock_gettime(CLOCK_REALTIME, ts) == 0 ? base : 0;
}

/*
 * An absolute sleep on the wall clock names a frozen time: it is moved onto the real clock by the
 * frozen clock's distance from it, so it ends when the frozen clock reaches it.
 */
EXPORT int clock_nanosleep(clockid_t id, int flags, const struct timespec *req, struct timespec *rem) {
  struct timespec moved;
  if ((flags & TIMER_ABSTIME) && is_realtime(id)) {
    int64_t f = frozen_ns();
    if (f >= 0) {
      int64_t target = (int64_t)req->tv_sec * 1000000000LL + req->tv_nsec + (real_ns(id) - f);
      moved.tv_sec = target / 1000000000LL;
      moved.tv_nsec = target % 1000000000LL;
      req = &moved;
    }
  }
  /* clock_nanosleep returns the error number itself, not -1 */
  long r = raw_syscall(SYS_clock_nanosleep, id, flags, (long)req, (long)rem);
  return r < 0 ? (int)-r : 0;
}
