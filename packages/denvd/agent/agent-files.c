/*
 * files: a tar of a path, never following a link. The path is walked one component at a time;
 * links inside are archived as links, FIFOs and devices as their headers only (never opened),
 * sockets skipped.
 */
#include "denv-agent.h"

static char tarbuf[262144];
static size_t tarlen;
static int tar_conn;

static int tar_flush(void) {
  if (tarlen && send_frame(tar_conn, FRAME_OUT_STDOUT, tarbuf, (uint32_t)tarlen)) return -1;
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
static int files_status = FS_OTHER;

static int fail(const char *fmt, const char *a, int err) {
  files_status = err ? fs_status(err) : FS_INVALID;
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

void serve_files(int conn) {
  struct files_request req;
  if (read_files_request(conn, &req)) _exit(1);
  char *path = req.path, *user = req.user;
  tar_conn = conn;
  signal(SIGPIPE, SIG_IGN);
  int status = 1;
  if (user[0]) {
    struct ids ids;
    if (resolve_user(user, &ids, files_err, sizeof files_err)) {
      files_status = FS_NO_USER;
      goto done;
    }
    if (drop_to(&ids)) {
      fail("cannot become user %s: %s", user, errno);
      goto done;
    }
  }
  if (path[0] != '/') {
    files_status = FS_INVALID;
    snprintf(files_err, sizeof files_err, "%s: the path must be absolute", path);
    goto done;
  }
  /* Walk from / one component at a time; no link is followed on the way (agent-walk.c). */
  char leaf[NAME_MAX + 1];
  int cur = walk_parent(path, 0, leaf, sizeof leaf);
  if (cur < 0) {
    /* A missing component is said of the whole path (as ENOENT is); a link on the way is named. */
    files_status = walk_status;
    if (walk_status == FS_NOT_FOUND) snprintf(files_err, sizeof files_err, "%s: %s", path, strerror(ENOENT));
    else snprintf(files_err, sizeof files_err, "%s", walk_err);
    goto done;
  }
  if (!leaf[0]) {
    status = emit(cur, ".", ".", 0) || tar_flush() ? 1 : 0;
    goto done;
  }
  status = emit(cur, leaf, leaf, 0) || tar_flush() ? 1 : 0;
done:
  if (status && files_err[0]) send_frame(conn, FRAME_OUT_STDERR, files_err, (uint32_t)strlen(files_err));
  if (!status) {
    static const char end[1024];
    tarlen = 0;
    if (tar_write(end, sizeof end) || tar_flush()) status = 1;
  }
  int32_t code = status ? files_status : FS_OK;
  send_status(conn, code);
  end_request(conn);
}
