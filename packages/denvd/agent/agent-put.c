/*
 * put: a tar extracted at a path, as the request's user (denvd sends the service's own user unless
 * another was asked for). Files are created with that user's rights and owned by them; missing
 * parents are made, owned by them too. Nothing is replaced by something of another kind: a file
 * where a directory is, or a directory where a file is, is refused, never removed. The tar comes
 * checked by denvd (tar-sanitizer.ts: relative names, no "..", links inside the tree only, no
 * special entries, no setuid bits), so this only has to extract it faithfully. The destination,
 * each entry's parents and each directory entry are opened by walking (agent-walk.c): a link the
 * agent planted where a directory is expected is refused, never written through, even as root.
 *
 * Request: MODE_PUT, then struct put_request (denv-agent-protocol.h; FLAG_PUT_KEEP_OWNERS: keep
 * the tar's owners, which denvd sets only for root). Then frames from denvd: FRAME_IN_DATA tar
 * bytes, FRAME_IN_END. Answer: FRAME_OUT_STDERR with a message on failure, then FRAME_OUT_STATUS
 * with a put_status record (status FS_*, entries, bytes).
 */
#include "denv-agent.h"

#include <sys/time.h>

/* The tar arrives in frames; this reads it as one stream. */
static int in_conn;
static char *in_buf;
static uint32_t in_len, in_off;
static int in_ended;

static int in_fill(void) {
  for (;;) {
    char head[5];
    if (in_ended || read_full(in_conn, head, 5)) return -1;
    uint32_t len;
    memcpy(&len, head + 1, 4);
    if (len > (16u << 20)) return -1;
    if (head[0] == FRAME_IN_END) {
      in_ended = 1;
      return -1;
    }
    free(in_buf);
    in_buf = len ? malloc(len) : NULL;
    if (len && (!in_buf || read_full(in_conn, in_buf, len))) return -1;
    in_len = len;
    in_off = 0;
    if (len) return 0;
  }
}

static int in_read(void *dst, size_t n) {
  char *p = dst;
  while (n) {
    if (in_off == in_len && in_fill()) return -1;
    size_t take = in_len - in_off < n ? in_len - in_off : n;
    if (p) memcpy(p, in_buf + in_off, take), p += take;
    in_off += (uint32_t)take;
    n -= take;
  }
  return 0;
}

static char put_err[1024];
static int put_status;

static int put_fail(int err, const char *what, const char *why) {
  put_status = err ? fs_status(err) : FS_INVALID;
  snprintf(put_err, sizeof put_err, "%s: %s", what, why ? why : strerror(err));
  return -1;
}

/* A numeric tar field: octal, or base-256 when its first byte has the high bit (large sizes). */
static uint64_t tar_number(const char *f, size_t width) {
  if ((unsigned char)f[0] & 0x80) {
    uint64_t v = (unsigned char)f[0] & 0x7f;
    for (size_t i = 1; i < width; i++) v = (v << 8) | (unsigned char)f[i];
    return v;
  }
  uint64_t v = 0;
  for (size_t i = 0; i < width && f[i]; i++) {
    if (f[i] == ' ') continue;
    if (f[i] < '0' || f[i] > '7') break;
    v = v * 8 + (uint64_t)(f[i] - '0');
  }
  return v;
}

/* A failed walk's status and message, as this request's. */
static int walk_failed(void) {
  put_status = walk_status;
  snprintf(put_err, sizeof put_err, "%s", walk_err);
  return -1;
}

/*
 * The directory that holds entry `name` under the destination (made as needed, owned by the user,
 * 0755), walked from the destination without following a link, and the entry's own name in `leaf`.
 */
static int parent_of(int dest, const char *shown_dest, const char *name, char *leaf, size_t leaflen) {
  char rel[PATH_MAX];
  snprintf(rel, sizeof rel, "%s", name);
  char *slash = strrchr(rel, '/');
  const char *last = slash ? slash + 1 : rel;
  if (strlen(last) >= leaflen) return put_fail(ENAMETOOLONG, name, NULL);
  snprintf(leaf, leaflen, "%s", last);
  if (!strcmp(leaf, ".") || !strcmp(leaf, "..")) return put_fail(0, name, "an entry must not be named . or ..");
  if (slash) *slash = 0;
  else rel[0] = 0;
  int fd = walk_dir_at(dest, shown_dest, rel, 1, NULL);
  return fd < 0 ? walk_failed() : fd;
}

/* Clears the way for a non-directory at `leaf` in `dir`: a directory there is refused, anything else goes. */
static int clear_for_file(int dir, const char *leaf, const char *shown) {
  struct stat st;
  if (fstatat(dir, leaf, &st, AT_SYMLINK_NOFOLLOW)) return errno == ENOENT ? 0 : put_fail(errno, shown, NULL);
  if (S_ISDIR(st.st_mode)) {
    put_status = FS_IS_DIR;
    snprintf(put_err, sizeof put_err, "%s is a directory; a file cannot replace it", shown);
    return -1;
  }
  /* A link is replaced (tar's way), never written through; a regular file is overwritten in place. */
  if (!S_ISREG(st.st_mode) && unlinkat(dir, leaf, 0)) return put_fail(errno, shown, NULL);
  return 0;
}

static int write_file(int dir, const char *leaf, const char *shown, uint64_t size, mode_t mode, long uid, long gid,
                      int keep, time_t mtime) {
  if (clear_for_file(dir, leaf, shown)) return -1;
  /* O_NOFOLLOW: a link swapped in since the check is refused by the kernel, not written through. */
  int fd = openat(dir, leaf, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) {
    if (errno == ELOOP) {
      put_status = FS_LINK;
      snprintf(put_err, sizeof put_err, "%s is a symbolic link; denv does not write through links", shown);
      return -1;
    }
    return put_fail(errno, shown, NULL);
  }
  char buf[65536];
  uint64_t left = size;
  int rc = 0;
  while (left) {
    size_t take = left < sizeof buf ? (size_t)left : sizeof buf;
    if (in_read(buf, take)) {
      rc = put_fail(0, shown, "the tar ended inside this file");
      break;
    }
    if (!rc && write_full(fd, buf, take)) rc = put_fail(errno, shown, NULL);
    left -= take;
  }
  if (!rc && fchmod(fd, mode)) rc = put_fail(errno, shown, NULL);
  if (!rc && keep && fchown(fd, (uid_t)uid, (gid_t)gid)) rc = put_fail(errno, shown, NULL);
  if (!rc && mtime > 0) {
    struct timespec ts[2] = {{mtime, 0}, {mtime, 0}};
    futimens(fd, ts);
  }
  if (close(fd) && !rc) rc = put_fail(errno, shown, NULL);
  return rc;
}

/* A directory entry: made (or found) without following a link, then given its mode and owner. */
static int write_dir(int fd, const char *shown, mode_t mode, long uid, long gid, int keep) {
  /* An existing directory of another user keeps its mode: only its owner may change it. */
  if (fchmod(fd, mode) && errno != EPERM) return put_fail(errno, shown, NULL);
  if (keep && fchown(fd, (uid_t)uid, (gid_t)gid)) return put_fail(errno, shown, NULL);
  return 0;
}

/* One PAX record set: the keys a later header takes its values from. */
struct pax {
  char path[PATH_MAX];
  char link[PATH_MAX];
  long long size, uid, gid;
};

static void parse_pax(char *data, size_t len, struct pax *x) {
  size_t off = 0;
  while (off < len) {
    char *rec = data + off;
    long n = strtol(rec, NULL, 10);
    if (n <= 0 || off + (size_t)n > len) break;
    char *kv = memchr(rec, ' ', (size_t)n);
    char *eq = kv ? memchr(kv, '=', (size_t)(rec + n - kv)) : NULL;
    if (kv && eq) {
      size_t klen = (size_t)(eq - kv - 1), vlen = (size_t)(rec + n - eq - 2);
      char *val = eq + 1;
      if (klen == 4 && !memcmp(kv + 1, "path", 4) && vlen < sizeof x->path)
        memcpy(x->path, val, vlen), x->path[vlen] = 0;
      else if (klen == 8 && !memcmp(kv + 1, "linkpath", 8) && vlen < sizeof x->link)
        memcpy(x->link, val, vlen), x->link[vlen] = 0;
      else if (klen == 4 && !memcmp(kv + 1, "size", 4)) x->size = atoll(val);
      else if (klen == 3 && !memcmp(kv + 1, "uid", 3)) x->uid = atoll(val);
      else if (klen == 3 && !memcmp(kv + 1, "gid", 3)) x->gid = atoll(val);
    }
    off += (size_t)n;
  }
}

/* The tar's entries, each under directory `dest_fd` (shown as `dest`). */
static int extract_into(int dest_fd, const char *dest, int keep, uint32_t *entries, uint64_t *bytes) {
  struct pax x = {.size = -1, .uid = -1, .gid = -1};
  for (;;) {
    unsigned char h[512];
    if (in_read(h, 512)) return put_fail(0, dest, "the tar ended before its end marker");
    int zero = 1;
    for (int i = 0; i < 512 && zero; i++) zero = h[i] == 0;
    if (zero) return 0;
    unsigned sum = 0;
    for (int i = 0; i < 512; i++) sum += (i >= 148 && i < 156) ? ' ' : h[i];
    if (sum != tar_number((char *)h + 148, 8)) return put_fail(0, dest, "the tar has a damaged header");
    char type = (char)h[156];
    uint64_t size = x.size >= 0 ? (uint64_t)x.size : tar_number((char *)h + 124, 12);
    if (type == 'x' || type == 'g') {
      if (size > (1u << 20)) return put_fail(0, dest, "the tar has an extended header over 1 MiB");
      char *data = malloc(size + 1);
      if (!data || in_read(data, size) || in_read(NULL, (512 - size % 512) % 512)) {
        free(data);
        return put_fail(0, dest, "the tar ended inside an extended header");
      }
      if (type == 'x') parse_pax(data, size, &x);
      free(data);
      continue;
    }
    char name[PATH_MAX];
    if (x.path[0]) snprintf(name, sizeof name, "%s", x.path);
    else if (h[345]) snprintf(name, sizeof name, "%.155s/%.100s", (char *)h + 345, (char *)h);
    else snprintf(name, sizeof name, "%.100s", (char *)h);
    char target_name[PATH_MAX];
    snprintf(target_name, sizeof target_name, "%s", x.link[0] ? x.link : "");
    if (!target_name[0]) snprintf(target_name, sizeof target_name, "%.100s", (char *)h + 157);
    long uid = x.uid >= 0 ? (long)x.uid : (long)tar_number((char *)h + 108, 8);
    long gid = x.gid >= 0 ? (long)x.gid : (long)tar_number((char *)h + 116, 8);
    mode_t mode = (mode_t)(tar_number((char *)h + 100, 8) & 0777);
    time_t mtime = (time_t)tar_number((char *)h + 136, 12);
    memset(&x, 0, sizeof x);
    x.size = x.uid = x.gid = -1;
    size_t nl = strlen(name);
    while (nl > 1 && name[nl - 1] == '/') name[--nl] = 0;
    char path[PATH_MAX];
    int whole = !strcmp(name, ".") || !name[0];
    if ((size_t)snprintf(path, sizeof path, "%s%s%s", dest, whole ? "" : "/", whole ? "" : name) >= sizeof path)
      return put_fail(ENAMETOOLONG, name, NULL);
    int rc;
    if (whole) {
      rc = type == '5' ? write_dir(dest_fd, path, mode, uid, gid, keep)
                       : put_fail(0, dest, "only a directory entry can name the destination itself");
      if (rc) return -1;
      (*entries)++;
      continue;
    }
    char leaf[NAME_MAX + 1];
    int dir = parent_of(dest_fd, dest, name, leaf, sizeof leaf);
    if (dir < 0) return -1;
    if (type == '5') {
      char shown_parent[PATH_MAX];
      snprintf(shown_parent, sizeof shown_parent, "%s", path);
      *strrchr(shown_parent, '/') = 0;
      int fd = walk_dir_at(dir, shown_parent, leaf, 1, NULL);
      if (fd < 0) rc = walk_failed();
      else {
        rc = write_dir(fd, path, mode, uid, gid, keep);
        close(fd);
      }
    } else if (type == '0' || type == 0 || type == '7') {
      rc = write_file(dir, leaf, path, size, mode, uid, gid, keep, mtime);
      if (!rc && in_read(NULL, (512 - size % 512) % 512)) rc = put_fail(0, path, "the tar ended early");
      *bytes += size;
    } else if (type == '2') {
      rc = clear_for_file(dir, leaf, path);
      if (!rc && symlinkat(target_name, dir, leaf)) rc = put_fail(errno, path, NULL);
      if (!rc && keep && fchownat(dir, leaf, (uid_t)uid, (gid_t)gid, AT_SYMLINK_NOFOLLOW))
        rc = put_fail(errno, path, NULL);
    } else if (type == '1') {
      /* A hard link's target is an earlier entry of this tar: found by walking, too. */
      char tleaf[NAME_MAX + 1];
      int tdir = parent_of(dest_fd, dest, target_name, tleaf, sizeof tleaf);
      rc = tdir < 0 ? -1 : clear_for_file(dir, leaf, path);
      if (!rc && linkat(tdir, tleaf, dir, leaf, 0)) rc = put_fail(errno, path, NULL);
      if (tdir >= 0) close(tdir);
    } else rc = put_fail(0, name, "only files, directories and links can be written");
    close(dir);
    if (rc) return -1;
    (*entries)++;
  }
}


/* Extracts the tar at `dest`, made as needed. */
static int extract(const char *dest, int keep, uint32_t *entries, uint64_t *bytes) {
  /* The destination and every directory under it are opened by walking: a link is never followed. */
  int dest_fd = walk_dir(dest, 1, NULL);
  if (dest_fd < 0) return walk_failed();
  int rc = extract_into(dest_fd, dest, keep, entries, bytes);
  close(dest_fd);
  return rc;
}

void serve_put(int conn) {
  struct put_request req;
  if (read_put_request(conn, &req)) _exit(1);
  char *path = req.path, *user = req.user;
  uint32_t flags = req.flags;
  in_conn = conn;
  signal(SIGPIPE, SIG_IGN);
  uint32_t entries = 0;
  uint64_t bytes = 0;
  put_status = FS_OTHER;
  int rc = -1;
  if (user[0]) {
    struct ids ids;
    if (resolve_user(user, &ids, put_err, sizeof put_err)) {
      put_status = FS_NO_USER;
      goto done;
    }
    if (drop_to(&ids)) {
      put_fail(errno, user, NULL);
      goto done;
    }
  }
  umask(0);
  if (path[0] != '/') {
    put_fail(0, path, "the path must be absolute");
    goto done;
  }
  rc = extract(path, flags & FLAG_PUT_KEEP_OWNERS, &entries, &bytes);
done:;
  int32_t status = rc ? put_status : FS_OK;
  if (rc && put_err[0]) send_frame(conn, FRAME_OUT_STDERR, put_err, (uint32_t)strlen(put_err));
  /* The rest of the tar is not wanted: read it to its end so denvd's writes do not fail first. */
  while (!in_ended && in_fill() == 0) {}
  char result[16];
  struct put_status_record answer = {.status = status, .entries = entries, .bytes = bytes};
  send_frame(conn, FRAME_OUT_STATUS, result, (uint32_t)put_put_status_record(result, sizeof result, &answer));
  shutdown(conn, SHUT_WR);
  _exit(0);
}
