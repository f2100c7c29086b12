/*
 * denv-agent: runs inside a sandbox so that an exec does not pay for a runc exec. It is the
 * container's entrypoint (init mode, below): it forks itself off as root and then becomes the
 * service's own command, as the service's user. The agent dials denvd: denvd listens on a unix
 * socket in a host directory only root can enter, mounted read-only into the container at /.denv/run.
 *
 * Why the agent dials and denvd listens: the container (root in it, for an image sandbox) can
 * change anything it can write. If denvd connected to a socket the agent made, the container could
 * replace it with a link to any socket on the host and denvd (root) would connect there. A socket
 * denvd made, in a directory the container sees read-only, cannot be redirected; all the container
 * can do is connect to it, which only lets it speak for itself.
 *
 * Channel: the agent opens a control connection ("DNVA", u32 version), then for every 16-byte
 * nonce denvd writes on it, opens a new connection ("DNVC", nonce) and serves one request on it.
 *
 * Requests (all integers little-endian u32):
 *   exec:   argc, argc x (len, bytes); envc, envc x (len, "K=V"); len, cwd (0: none);
 *           len, user ("name|uid[:group|gid]", 0: the agent's own, root); flags (1: set HOME from
 *           the user's passwd entry, as `docker exec` does when the container sets none)
 *   then frames both ways: u8 type, u32 len, bytes
 *     client -> agent: 0 stdin data, 1 stdin end, 9 kill the process tree
 *     agent -> client: 1 stdout, 2 stderr, 3 exit (4 bytes: the status, 128+N for signal N)
 *   A client that goes away kills the command's whole process group.
 *
 *   port:   0xffffffff, port. The agent connects to 127.0.0.1:port inside the container's network
 *           namespace, answers one status byte (0, or the connect errno), then relays raw bytes.
 *
 *   files:  0xfffffffe, len, path, len, user. A tar of the path, written as frames 1 (tar bytes),
 *           2 (an error message) and 3 (the status: 0, or 1 when it failed). The path is walked
 *           one component at a time without following any link; links inside are archived as
 *           links; FIFOs and devices as their headers only (never opened); sockets skipped.
 *
 * Users and groups are resolved here, inside the container, from its own /etc/passwd and
 * /etc/group (read as regular files of at most 1 MiB, never blocking): denvd never reads a path
 * the container can change. Statically linked: it needs nothing from the image.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROTOCOL_VERSION 2
#define KEEP 0xffffffffu
#define MODE_PORT 0xffffffffu
#define MODE_FILES 0xfffffffeu
#define MAX_IDS_FILE (1 << 20)
#define MAX_GROUPS 64

extern char **environ;

static int read_full(int fd, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r == 0) return -1;
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    got += (size_t)r;
  }
  return 0;
}

static int write_full(int fd, const void *buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(fd, (const char *)buf + done, n - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    done += (size_t)w;
  }
  return 0;
}

static int read_u32(int fd, uint32_t *v) { return read_full(fd, v, 4); }

static char *read_str(int fd) {
  uint32_t len;
  if (read_u32(fd, &len) || len > (64u << 20)) return NULL;
  char *s = malloc(len + 1);
  if (!s || read_full(fd, s, len)) return NULL;
  s[len] = 0;
  return s;
}

static int send_frame(int fd, uint8_t type, const void *data, uint32_t len) {
  char head[5];
  head[0] = (char)type;
  memcpy(head + 1, &len, 4);
  if (write_full(fd, head, 5)) return -1;
  return len ? write_full(fd, data, len) : 0;
}

static char **read_list_n(int fd, uint32_t count) {
  if (count > 100000) return NULL;
  char **list = calloc(count + 1, sizeof(char *));
  if (!list) return NULL;
  for (uint32_t i = 0; i < count; i++) {
    list[i] = read_str(fd);
    if (!list[i]) return NULL;
  }
  return list;
}

static char **read_list(int fd, uint32_t *count) {
  if (read_u32(fd, count)) return NULL;
  return read_list_n(fd, *count);
}

/* ---------------------------------------------------------------------------------------------
 * Users, from the container's own files. */

/* Reads a small regular file whole (NUL-terminated); NULL when absent or not a regular file. */
static char *read_small_file(const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return NULL;
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size > MAX_IDS_FILE) {
    close(fd);
    return NULL;
  }
  char *buf = malloc((size_t)st.st_size + 1);
  size_t got = 0;
  while (buf && got < (size_t)st.st_size) {
    ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
    if (r <= 0) break;
    got += (size_t)r;
  }
  close(fd);
  if (buf) buf[got] = 0;
  return buf;
}

static int all_digits(const char *s) {
  if (!*s) return 0;
  for (; *s; s++)
    if (*s < '0' || *s > '9') return 0;
  return 1;
}

/* Splits one passwd/group line into up to n ':'-separated fields (in place). */
static int split_fields(char *line, char **fields, int n) {
  int k = 0;
  fields[k++] = line;
  for (char *p = line; *p && k < n; p++)
    if (*p == ':') {
      *p = 0;
      fields[k++] = p + 1;
    }
  return k;
}

struct ids {
  uid_t uid;
  gid_t gid;
  char home[1024];
  char name[256];
  int have_entry;
  gid_t groups[MAX_GROUPS];
  int ngroups;
};

/* Finds a passwd entry by name or uid; fills name, uid, gid, home. */
static int passwd_lookup(const char *name, long uid, struct ids *out) {
  char *text = read_small_file("/etc/passwd");
  if (!text) return 0;
  int found = 0;
  char *lines = NULL;
  for (char *line = strtok_r(text, "\n", &lines); line && !found; line = strtok_r(NULL, "\n", &lines)) {
    char *f[7];
    if (split_fields(line, f, 7) < 7) continue;
    if (name ? strcmp(f[0], name) != 0 : (!all_digits(f[2]) || atol(f[2]) != uid)) continue;
    if (!all_digits(f[2]) || !all_digits(f[3])) continue;
    out->uid = (uid_t)atol(f[2]);
    out->gid = (gid_t)atol(f[3]);
    snprintf(out->home, sizeof out->home, "%s", f[5]);
    snprintf(out->name, sizeof out->name, "%s", f[0]);
    out->have_entry = 1;
    found = 1;
  }
  free(text);
  return found;
}

/* A group's gid by name; -1 when there is none. */
static long group_gid(const char *name) {
  char *text = read_small_file("/etc/group");
  if (!text) return -1;
  long gid = -1;
  char *lines = NULL;
  for (char *line = strtok_r(text, "\n", &lines); line && gid < 0; line = strtok_r(NULL, "\n", &lines)) {
    char *f[4];
    if (split_fields(line, f, 4) < 3) continue;
    if (strcmp(f[0], name) == 0 && all_digits(f[2])) gid = atol(f[2]);
  }
  free(text);
  return gid;
}

/* Supplementary groups: every group that lists the user as a member. */
static void member_groups(struct ids *out) {
  out->ngroups = 0;
  out->groups[out->ngroups++] = out->gid;
  if (!out->name[0]) return;
  char *text = read_small_file("/etc/group");
  if (!text) return;
  char *lines = NULL;
  for (char *line = strtok_r(text, "\n", &lines); line; line = strtok_r(NULL, "\n", &lines)) {
    char *f[4];
    if (split_fields(line, f, 4) < 4 || !all_digits(f[2])) continue;
    char *members = NULL;
    for (char *m = strtok_r(f[3], ",", &members); m; m = strtok_r(NULL, ",", &members)) {
      if (strcmp(m, out->name) == 0 && out->ngroups < MAX_GROUPS) {
        out->groups[out->ngroups++] = (gid_t)atol(f[2]);
        break;
      }
    }
  }
  free(text);
}

/* "name|uid[:group|gid]" -> ids, as `docker exec -u` resolves it. Writes a message on failure. */
static int resolve_user(const char *spec, struct ids *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  char user[512];
  snprintf(user, sizeof user, "%s", spec);
  char *group = strchr(user, ':');
  if (group) *group++ = 0;
  if (all_digits(user)) {
    out->uid = (uid_t)atol(user);
    if (!passwd_lookup(NULL, atol(user), out)) {
      out->uid = (uid_t)atol(user);
      out->gid = out->uid;
    }
  } else if (!passwd_lookup(user, 0, out)) {
    /* Docker's wording, which frameworks built on `docker exec` look for. */
    snprintf(err, errlen, "unable to find user %s: no matching entries in passwd file\n", user);
    return -1;
  }
  if (group) {
    if (all_digits(group)) out->gid = (gid_t)atol(group);
    else {
      long gid = group_gid(group);
      if (gid < 0) {
        snprintf(err, errlen, "unable to find group %s: no matching entries in group file\n", group);
        return -1;
      }
      out->gid = (gid_t)gid;
    }
  }
  member_groups(out);
  return 0;
}

static int drop_to(const struct ids *ids) {
  if (setgroups((size_t)ids->ngroups, ids->groups) || setgid(ids->gid) || setuid(ids->uid)) return -1;
  return 0;
}

/* ---------------------------------------------------------------------------------------------
 * exec */

/*
 * The command's environment: the agent's own (the container's), with the request's on top. With
 * `home` (the container's configuration sets no HOME), the HOME the agent itself was started with
 * (root's) is replaced by the user's, as `docker exec -u` does.
 */
static char **merge_env(char **extra, uint32_t n, const char *home) {
  size_t base = 0;
  while (environ[base]) base++;
  char **env = calloc(base + n + 2, sizeof(char *));
  size_t k = 0;
  int has_home = 0;
  for (size_t i = 0; i < base; i++) {
    int overridden = 0;
    size_t klen = strcspn(environ[i], "=");
    for (uint32_t j = 0; j < n; j++)
      if (strncmp(extra[j], environ[i], klen) == 0 && extra[j][klen] == '=') overridden = 1;
    if (home && strncmp(environ[i], "HOME=", 5) == 0) overridden = 1;
    if (!overridden) env[k++] = environ[i];
  }
  for (uint32_t j = 0; j < n; j++) env[k++] = extra[j];
  for (size_t i = 0; i < k; i++)
    if (strncmp(env[i], "HOME=", 5) == 0) has_home = 1;
  if (home && !has_home) {
    char *h = malloc(strlen(home) + 6);
    sprintf(h, "HOME=%s", home);
    env[k++] = h;
  }
  env[k] = NULL;
  return env;
}

/* Relays bytes between a and b; each direction's end is passed on as a half-close. */
static void relay(int a, int b) {
  char buf[65536];
  int a_open = 1, b_open = 1;
  signal(SIGPIPE, SIG_IGN);
  while (a_open || b_open) {
    struct pollfd fds[2] = {{a_open ? a : -1, POLLIN, 0}, {b_open ? b : -1, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; i++) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int from = i ? b : a, to = i ? a : b;
      ssize_t r = read(from, buf, sizeof buf);
      if (r <= 0 || write_full(to, buf, (size_t)r)) {
        shutdown(to, SHUT_WR);
        if (i) b_open = 0; else a_open = 0;
        if (r > 0) return; /* the other side is gone for good */
      }
    }
  }
}

static void serve_port(int conn) {
  uint32_t port;
  if (read_u32(conn, &port) || port == 0 || port > 65535) _exit(1);
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  uint8_t status = 0;
  if (s < 0 || connect(s, (struct sockaddr *)&addr, sizeof addr)) status = (uint8_t)(errno ? errno : 1);
  if (write_full(conn, &status, 1) || status) _exit(0);
  relay(conn, s);
  _exit(0);
}

/* ---------------------------------------------------------------------------------------------
 * files: a tar of a path, never following a link */

static char tarbuf[65536];
static size_t tarlen;
static int tar_conn;

static int tar_flush(void) {
  if (tarlen && send_frame(tar_conn, 1, tarbuf, (uint32_t)tarlen)) return -1;
  tarlen = 0;
  return 0;
}

static int tar_write(const void *data, size_t n) {
  const char *p = data;
  while (n) {
    size_t room = sizeof tarbuf - tarlen, take = n < room ? n : room;
    memcpy(tarbuf + tarlen, p, take);
    tarlen += take;
    p += take;
    n -= take;
    if (tarlen == sizeof tarbuf && tar_flush()) return -1;
  }
  return 0;
}

static int tar_pad(uint64_t size) {
  static const char zeros[512];
  size_t pad = (size_t)((512 - size % 512) % 512);
  return pad ? tar_write(zeros, pad) : 0;
}

/* A NUL-terminated octal field; a value it cannot hold is written as 0 (PAX carries those). */
static void octal(char *field, size_t width, uint64_t value) {
  uint64_t max = (1ULL << (3 * (width - 1))) - 1;
  char tmp[32];
  snprintf(tmp, sizeof tmp, "%0*llo", (int)(width - 1), (unsigned long long)(value > max ? 0 : value));
  memcpy(field, tmp, width - 1);
  field[width - 1] = 0;
}

/* One PAX record "LEN key=value\n", whose length counts itself. */
static size_t pax_record(char *out, size_t room, const char *key, const char *value) {
  size_t body = strlen(key) + strlen(value) + 3; /* ' ', '=', '\n' */
  size_t len = body + 1;
  for (;;) {
    char digits[32];
    size_t d = (size_t)snprintf(digits, sizeof digits, "%zu", len);
    if (body + d == len) break;
    len = body + d;
  }
  if (len >= room) return 0;
  return (size_t)snprintf(out, room, "%zu %s=%s\n", len, key, value);
}

static int tar_header(const char *name, const char *link, const struct stat *st, char type, uint64_t size) {
  char pax[16384];
  size_t paxlen = 0;
  char num[32];
  if (strlen(name) > 99) paxlen += pax_record(pax + paxlen, sizeof pax - paxlen, "path", name);
  if (link && strlen(link) > 99) paxlen += pax_record(pax + paxlen, sizeof pax - paxlen, "linkpath", link);
  if (size > 077777777777ULL) {
    snprintf(num, sizeof num, "%llu", (unsigned long long)size);
    paxlen += pax_record(pax + paxlen, sizeof pax - paxlen, "size", num);
  }
  if (st->st_uid > 07777777) {
    snprintf(num, sizeof num, "%u", (unsigned)st->st_uid);
    paxlen += pax_record(pax + paxlen, sizeof pax - paxlen, "uid", num);
  }
  if (st->st_gid > 07777777) {
    snprintf(num, sizeof num, "%u", (unsigned)st->st_gid);
    paxlen += pax_record(pax + paxlen, sizeof pax - paxlen, "gid", num);
  }
  if (paxlen) {
    struct stat none;
    memset(&none, 0, sizeof none);
    none.st_mode = 0644;
    if (tar_header("PaxHeader", NULL, &none, 'x', paxlen) || tar_write(pax, paxlen) || tar_pad(paxlen))
      return -1;
  }
  char h[512];
  memset(h, 0, sizeof h);
  snprintf(h, 100, "%s", name);
  octal(h + 100, 8, st->st_mode & 07777);
  octal(h + 108, 8, st->st_uid > 07777777 ? 0 : st->st_uid);
  octal(h + 116, 8, st->st_gid > 07777777 ? 0 : st->st_gid);
  octal(h + 124, 12, size > 077777777777ULL ? 0 : size);
  octal(h + 136, 12, st->st_mtime > 0 ? (uint64_t)st->st_mtime : 0);
  memset(h + 148, ' ', 8);
  h[156] = type;
  if (link) snprintf(h + 157, 100, "%s", link);
  memcpy(h + 257, "ustar", 6);
  memcpy(h + 263, "00", 2);
  if (type == '3' || type == '4') {
    octal(h + 329, 8, major(st->st_rdev));
    octal(h + 337, 8, minor(st->st_rdev));
  }
  unsigned sum = 0;
  for (int i = 0; i < 512; i++) sum += (unsigned char)h[i];
  snprintf(h + 148, 8, "%06o", sum);
  h[155] = ' ';
  return tar_write(h, 512);
}

static char files_err[1024];

static int fail(const char *fmt, const char *a, int err) {
  snprintf(files_err, sizeof files_err, fmt, a, strerror(err));
  return -1;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Archives `name` in directory `dirfd` as `tarname`, recursing into directories. */
static int emit(int at, const char *name, const char *tarname, int depth) {
  struct stat st;
  if (depth > 256) return fail("%s: nested too deep%.0s", tarname, 0);
  if (fstatat(at, name, &st, AT_SYMLINK_NOFOLLOW)) return fail("%s: %s", tarname, errno);
  if (S_ISLNK(st.st_mode)) {
    char target[4096];
    ssize_t n = readlinkat(at, name, target, sizeof target - 1);
    if (n < 0) return fail("%s: %s", tarname, errno);
    target[n] = 0;
    return tar_header(tarname, target, &st, '2', 0);
  }
  if (S_ISDIR(st.st_mode)) {
    char dirname_[4200];
    snprintf(dirname_, sizeof dirname_, "%s/", tarname);
    if (tar_header(dirname_, NULL, &st, '5', 0)) return -1;
    int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return fail("%s: %s", tarname, errno);
    DIR *d = fdopendir(fd);
    if (!d) {
      close(fd);
      return fail("%s: %s", tarname, errno);
    }
    char **names = NULL;
    size_t count = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      if (count == cap) {
        cap = cap ? cap * 2 : 64;
        names = realloc(names, cap * sizeof *names);
      }
      names[count++] = strdup(e->d_name);
    }
    qsort(names, count, sizeof *names, cmp_names);
    int rc = 0;
    for (size_t i = 0; i < count && !rc; i++) {
      char child[4200];
      if ((size_t)snprintf(child, sizeof child, "%s/%s", tarname, names[i]) >= sizeof child)
        rc = fail("%s: a name is too long%.0s", tarname, 0);
      else rc = emit(dirfd(d), names[i], child, depth + 1);
    }
    for (size_t i = 0; i < count; i++) free(names[i]);
    free(names);
    closedir(d);
    return rc;
  }
  if (S_ISREG(st.st_mode)) {
    int fd = openat(at, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return fail("%s: %s", tarname, errno);
    struct stat now;
    if (fstat(fd, &now) || !S_ISREG(now.st_mode) || now.st_ino != st.st_ino || now.st_dev != st.st_dev) {
      close(fd);
      return fail("%s: changed while it was read%.0s", tarname, 0);
    }
    uint64_t size = (uint64_t)now.st_size, sent = 0;
    if (tar_header(tarname, NULL, &now, '0', size)) {
      close(fd);
      return -1;
    }
    char buf[65536];
    while (sent < size) {
      size_t want = size - sent < sizeof buf ? (size_t)(size - sent) : sizeof buf;
      ssize_t r = read(fd, buf, want);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        /* The file shrank: the header promised `size` bytes, so zeros make up the rest. */
        memset(buf, 0, want);
        r = (ssize_t)want;
      }
      if (tar_write(buf, (size_t)r)) {
        close(fd);
        return -1;
      }
      sent += (uint64_t)r;
    }
    close(fd);
    return tar_pad(size);
  }
  if (S_ISFIFO(st.st_mode)) return tar_header(tarname, NULL, &st, '6', 0);
  if (S_ISCHR(st.st_mode)) return tar_header(tarname, NULL, &st, '3', 0);
  if (S_ISBLK(st.st_mode)) return tar_header(tarname, NULL, &st, '4', 0);
  return 0; /* sockets have no place in a tar */
}

static void serve_files(int conn) {
  char *path = read_str(conn);
  char *user = path ? read_str(conn) : NULL;
  if (!path || !user) _exit(1);
  tar_conn = conn;
  signal(SIGPIPE, SIG_IGN);
  int status = 1;
  if (user[0]) {
    struct ids ids;
    if (resolve_user(user, &ids, files_err, sizeof files_err) || drop_to(&ids)) {
      if (!files_err[0]) snprintf(files_err, sizeof files_err, "cannot become user %s\n", user);
      goto done;
    }
  }
  if (path[0] != '/') {
    snprintf(files_err, sizeof files_err, "%s: the path must be absolute", path);
    goto done;
  }
  /* Walk from / one component at a time; no link is followed on the way. */
  int cur = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  char walked[4200] = "";
  char *save = NULL, *next = NULL;
  char *comp = strtok_r(path + 1, "/", &save);
  if (!comp) {
    status = emit(cur, ".", ".", 0) || tar_flush() ? 1 : 0;
    goto done;
  }
  for (;;) {
    next = strtok_r(NULL, "/", &save);
    if (!strcmp(comp, "..") || !strcmp(comp, ".")) {
      snprintf(files_err, sizeof files_err, "%s/%s: the path must not contain . or ..", walked, comp);
      goto done;
    }
    if (!next) break;
    size_t wl = strlen(walked);
    snprintf(walked + wl, sizeof walked - wl, "/%s", comp);
    int fd = openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      struct stat st;
      if (!fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) && S_ISLNK(st.st_mode))
        snprintf(files_err, sizeof files_err,
                 "%s is a symbolic link; denv does not follow links in a path (read the link's target)", walked);
      else snprintf(files_err, sizeof files_err, "%s: %s", walked, strerror(err));
      goto done;
    }
    close(cur);
    cur = fd;
    comp = next;
  }
  status = emit(cur, comp, comp, 0) || tar_flush() ? 1 : 0;
done:
  if (status && files_err[0]) send_frame(conn, 2, files_err, (uint32_t)strlen(files_err));
  if (!status) {
    static const char end[1024];
    tarlen = 0;
    if (tar_write(end, sizeof end) || tar_flush()) status = 1;
  }
  int32_t code = status;
  send_frame(conn, 3, &code, 4);
  shutdown(conn, SHUT_WR);
  char drain[256];
  struct pollfd p = {conn, POLLIN, 0};
  while (poll(&p, 1, 10000) > 0)
    if (read(conn, drain, sizeof drain) <= 0) break;
  _exit(0);
}

static void serve(int conn) {
  uint32_t argc, envc, flags;
  if (read_u32(conn, &argc)) _exit(1);
  if (argc == MODE_PORT) serve_port(conn);
  if (argc == MODE_FILES) serve_files(conn);
  char **argv = read_list_n(conn, argc);
  char **extra = argv ? read_list(conn, &envc) : NULL;
  char *cwd = extra ? read_str(conn) : NULL;
  char *user = cwd ? read_str(conn) : NULL;
  if (!argv || !extra || !cwd || !user || argc == 0 || read_u32(conn, &flags)) _exit(1);
  int in[2], out[2], err[2];
  if (pipe(in) || pipe(out) || pipe(err)) _exit(1);
  pid_t pid = fork();
  if (pid == 0) {
    setsid(); /* its own process group: a kill reaches every descendant */
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    for (int fd = 3; fd < 1024; fd++) close(fd);
    const char *home = NULL;
    if (user[0]) {
      struct ids ids;
      char msg[1024];
      if (resolve_user(user, &ids, msg, sizeof msg)) {
        write_full(2, msg, strlen(msg));
        _exit(126);
      }
      if (drop_to(&ids)) {
        fprintf(stderr, "denv-agent: cannot become user %s: %s\n", user, strerror(errno));
        _exit(126);
      }
      if (flags & 1) home = ids.have_entry && ids.home[0] ? ids.home : "/";
    }
    if (cwd[0] && chdir(cwd)) {
      fprintf(stderr, "denv-agent: chdir %s: %s\n", cwd, strerror(errno));
      _exit(126);
    }
    char **env = merge_env(extra, envc, home);
    environ = env;
    execvp(argv[0], argv);
    fprintf(stderr, "denv-agent: %s: %s\n", argv[0], strerror(errno));
    _exit(errno == ENOENT ? 127 : 126);
  }
  close(in[0]);
  close(out[1]);
  close(err[1]);
  int stdin_fd = in[1];
  struct pollfd fds[3] = {{conn, POLLIN, 0}, {out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_out = 1, open_err = 1, killed = 0;
  char buf[65536];
  signal(SIGPIPE, SIG_IGN);
  while (open_out || open_err) {
    fds[1].fd = open_out ? out[0] : -1;
    fds[2].fd = open_err ? err[0] : -1;
    if (poll(fds, 3, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      char head[5];
      if (read_full(conn, head, 5)) {
        /* the client is gone: nothing may outlive it */
        kill(-pid, SIGKILL);
        killed = 1;
        fds[0].fd = -1;
      } else {
        uint32_t len;
        memcpy(&len, head + 1, 4);
        if (len > (16u << 20)) _exit(1);
        char *data = len ? malloc(len) : NULL;
        if (len && (!data || read_full(conn, data, len))) _exit(1);
        if (head[0] == 0 && stdin_fd >= 0) {
          if (write_full(stdin_fd, data, len)) { close(stdin_fd); stdin_fd = -1; }
        } else if (head[0] == 1 && stdin_fd >= 0) {
          close(stdin_fd);
          stdin_fd = -1;
        } else if (head[0] == 9) {
          kill(-pid, SIGKILL);
          killed = 1;
        }
        free(data);
      }
    }
    for (int i = 1; i <= 2; i++) {
      if (fds[i].fd >= 0 && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
        ssize_t r = read(fds[i].fd, buf, sizeof buf);
        if (r <= 0) {
          if (i == 1) open_out = 0; else open_err = 0;
        } else if (!killed || fds[0].fd >= 0) {
          if (send_frame(conn, (uint8_t)i, buf, (uint32_t)r)) { kill(-pid, SIGKILL); killed = 1; fds[0].fd = -1; }
        }
      }
    }
  }
  if (stdin_fd >= 0) close(stdin_fd);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  /* Background children of the command are part of its tree: they go with it. */
  kill(-pid, SIGKILL);
  int32_t code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  send_frame(conn, 3, &code, 4);
  /* The client may still be writing (stdin it no longer needs): let it finish and hang up first,
   * so it reads the status instead of a broken pipe. */
  shutdown(conn, SHUT_WR);
  struct pollfd p = {conn, POLLIN, 0};
  while (poll(&p, 1, 10000) > 0) {
    if (read(conn, buf, sizeof buf) <= 0) break;
  }
  _exit(0);
}

/* ---------------------------------------------------------------------------------------------
 * The channel to denvd. */

static int dial(const char *path) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  strncpy(addr.sun_path, path, sizeof addr.sun_path - 1);
  if (connect(s, (struct sockaddr *)&addr, sizeof addr)) {
    close(s);
    return -1;
  }
  return s;
}

/* Dials denvd and serves its requests, forever (reconnecting after a denvd restart). */
static void agent_loop(const char *sock) {
  signal(SIGCHLD, SIG_IGN); /* request handlers are reaped by the kernel */
  signal(SIGPIPE, SIG_IGN);
  unsigned backoff_ms = 20;
  for (;;) {
    int ctl = dial(sock);
    if (ctl < 0) {
      /* denvd is not listening (yet, or it is restarting): try again, a little later each time. */
      struct timespec ts = {backoff_ms / 1000, (long)(backoff_ms % 1000) * 1000000L};
      nanosleep(&ts, NULL);
      if (backoff_ms < 1000) backoff_ms *= 2;
      continue;
    }
    backoff_ms = 20;
    uint32_t version = PROTOCOL_VERSION;
    if (write_full(ctl, "DNVA", 4) || write_full(ctl, &version, 4)) {
      close(ctl);
      continue;
    }
    unsigned char nonce[16];
    while (read_full(ctl, nonce, sizeof nonce) == 0) {
      pid_t h = fork();
      if (h == 0) {
        close(ctl);
        signal(SIGCHLD, SIG_DFL); /* the handler waits for its own command */
        int conn = dial(sock);
        if (conn < 0 || write_full(conn, "DNVC", 4) || write_full(conn, nonce, sizeof nonce)) _exit(1);
        serve(conn);
        _exit(0);
      }
    }
    close(ctl);
  }
}

/*
 * init mode, the container's entrypoint: `denv-agent init SOCKET USER FLAGS -- PROGRAM ARGS...`.
 * The container starts as root, with the container's capabilities; the agent forks off and keeps
 * them (it runs commands as whichever user is asked), then this process becomes the service:
 * it drops to USER (resolved from the container's own files; empty: stays root), sets HOME from
 * the user's passwd entry when FLAGS has 'h' (the configuration sets none), and execs PROGRAM.
 * The service's processes therefore run as its user under no-new-privileges, and the agent is
 * never something a command could start or replace.
 */
static int run_init(int argc, char **argv) {
  if (argc < 7 || strcmp(argv[5], "--") != 0) {
    fprintf(stderr, "usage: denv-agent init SOCKET USER FLAGS -- PROGRAM [ARGS...]\n");
    return 2;
  }
  const char *sock = argv[2], *user = argv[3], *flags = argv[4];
  char **prog = argv + 6;
  pid_t agent = fork();
  if (agent == 0) {
    setsid(); /* no terminal, no signal meant for the service's group */
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
    }
    for (int fd = 3; fd < 1024; fd++)
      if (fd != devnull) close(fd);
    agent_loop(sock);
    _exit(0);
  }
  if (user[0]) {
    struct ids ids;
    char msg[1024];
    if (resolve_user(user, &ids, msg, sizeof msg)) {
      fputs(msg, stderr);
      return 126;
    }
    if (drop_to(&ids)) {
      fprintf(stderr, "denv-agent: cannot become user %s: %s\n", user, strerror(errno));
      return 126;
    }
    if (strchr(flags, 'h')) setenv("HOME", ids.have_entry && ids.home[0] ? ids.home : "/", 1);
  }
  execvp(prog[0], prog);
  fprintf(stderr, "denv-agent: %s: %s\n", prog[0], strerror(errno));
  return errno == ENOENT ? 127 : 126;
}

int main(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "init") == 0) return run_init(argc, argv);
  if (argc != 2) {
    fprintf(stderr, "usage: denv-agent SOCKET | denv-agent init SOCKET USER FLAGS -- PROGRAM [ARGS...]\n");
    return 2;
  }
  agent_loop(argv[1]);
  return 0;
}
