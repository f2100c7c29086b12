/*
 * fsop: stat, list, mkdir, remove and rename, as the request's user (the service's own unless
 * another was asked for), so the kernel holds that user's permissions. Nothing is followed inside
 * what is listed or removed: a link is reported (or removed) as a link.
 *
 * Request: MODE_FSOP, then struct fsop_request (denv-agent-protocol.h: op, path, `to` for
 * rename, user, flags with FLAG_FSOP_DEEP for mkdir's parents and remove's recursion, depth for
 * list: 1 = one level). Every path is walked from / without following a link (agent-walk.c): a
 * link where a directory is expected is refused. Answer: FRAME_OUT_ENTRIES with an entry record per
 * file (stat, list), FRAME_OUT_CREATED for mkdir (u8: 1 made, 0 was there), FRAME_OUT_STDERR a
 * message on failure, then FRAME_OUT_STATUS with a status record (FS_*).
 */
#include "denv-agent.h"

/* A listing larger than this is refused: list a smaller path, or less deep. */
#define MAX_LIST_ENTRIES 100000

static int fs_conn;
static char fs_err[1024];
static int fs_code;
static unsigned long listed;

static int op_fail(int err, const char *path, const char *why) {
  fs_code = err ? fs_status(err) : FS_INVALID;
  snprintf(fs_err, sizeof fs_err, "%s: %s", path, why ? why : strerror(err));
  return -1;
}

/* Owner and group names from the container's own files, the last one of each kept. */
static const char *owner_name(uid_t uid) {
  static uid_t last = (uid_t)-1;
  static char name[256];
  if (uid != last) {
    struct ids ids;
    char spec[32], msg[64];
    snprintf(spec, sizeof spec, "%u", (unsigned)uid);
    name[0] = 0;
    if (!resolve_user(spec, &ids, msg, sizeof msg) && ids.have_entry) snprintf(name, sizeof name, "%s", ids.name);
    last = uid;
  }
  return name;
}

static const char *group_name(gid_t gid) {
  static gid_t last = (gid_t)-1;
  static char name[256];
  if (gid != last) {
    name[0] = 0;
    group_name_of(gid, name, sizeof name);
    last = gid;
  }
  return name;
}

static int send_entry(const char *name, const struct stat *st, const char *link) {
  char buf[PATH_MAX * 2 + 1024];
  /* type: the index in denvd's ENTRY_TYPES (file, directory, symlink, other). */
  struct entry_record e = {
      .type = S_ISREG(st->st_mode) ? 0 : S_ISDIR(st->st_mode) ? 1 : S_ISLNK(st->st_mode) ? 2 : 3,
      .mode = st->st_mode & 07777,
      .uid = st->st_uid,
      .gid = st->st_gid,
      .size = (uint64_t)st->st_size,
      .mtime = (int64_t)st->st_mtim.tv_sec,
      .nsec = (uint32_t)st->st_mtim.tv_nsec,
      .name = name,
      .link = link ? link : "",
      .owner = owner_name(st->st_uid),
      .group = group_name(st->st_gid),
  };
  int len = put_entry_record(buf, sizeof buf, &e);
  if (len < 0) return op_fail(ENAMETOOLONG, name, NULL);
  return send_frame(fs_conn, FRAME_OUT_ENTRIES, buf, (uint32_t)len);
}

/*
 * A failed walk's status and message, as this operation's. A missing component is said of the
 * whole path asked for (as the kernel's ENOENT would be); a link or a file on the way is named.
 */
static int walk_failed(const char *path) {
  fs_code = walk_status;
  if (walk_status == FS_NOT_FOUND) snprintf(fs_err, sizeof fs_err, "%s: %s", path, strerror(ENOENT));
  else snprintf(fs_err, sizeof fs_err, "%s", walk_err);
  return -1;
}

static int op_stat(const char *path) {
  char leaf[NAME_MAX + 1];
  int dir = walk_parent(path, 0, leaf, sizeof leaf);
  if (dir < 0) return walk_failed(path);
  struct stat st;
  int rc = leaf[0] ? fstatat(dir, leaf, &st, AT_SYMLINK_NOFOLLOW) : fstat(dir, &st);
  if (rc) {
    close(dir);
    return op_fail(errno, path, NULL);
  }
  char link[PATH_MAX] = "";
  if (S_ISLNK(st.st_mode)) {
    ssize_t n = readlinkat(dir, leaf, link, sizeof link - 1);
    if (n >= 0) link[n] = 0;
  }
  close(dir);
  return send_entry(path, &st, link);
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The entries of directory `fd`, named under `rel`, down to `depth` more levels. */
static int list_dir(int fd, const char *rel, unsigned depth) {
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return op_fail(errno, rel, NULL);
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
  qsort(names, count, sizeof *names, by_name);
  int rc = 0;
  for (size_t i = 0; i < count && !rc; i++) {
    if (++listed > MAX_LIST_ENTRIES) {
      rc = op_fail(0, rel, "over 100,000 entries; list a smaller path, or less deep");
      break;
    }
    char child[PATH_MAX];
    if ((size_t)snprintf(child, sizeof child, "%s%s%s", rel, rel[0] ? "/" : "", names[i]) >= sizeof child) {
      rc = op_fail(ENAMETOOLONG, rel, NULL);
      break;
    }
    struct stat st;
    if (fstatat(dirfd(d), names[i], &st, AT_SYMLINK_NOFOLLOW)) continue; /* gone meanwhile */
    char link[PATH_MAX] = "";
    if (S_ISLNK(st.st_mode)) {
      ssize_t n = readlinkat(dirfd(d), names[i], link, sizeof link - 1);
      if (n >= 0) link[n] = 0;
    }
    rc = send_entry(child, &st, link);
    if (!rc && S_ISDIR(st.st_mode) && depth > 1) {
      int sub = openat(dirfd(d), names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      /* A directory the user may not open is listed, not entered. */
      if (sub >= 0) rc = list_dir(sub, child, depth - 1);
    }
  }
  for (size_t i = 0; i < count; i++) free(names[i]);
  free(names);
  closedir(d);
  return rc;
}

static int op_list(const char *path, unsigned depth) {
  int fd = walk_dir(path, 0, NULL);
  if (fd < 0) return walk_failed(path);
  return list_dir(fd, "", depth ? depth : 1);
}

static int op_mkdir(const char *path, int parents) {
  int made = 0;
  if (parents) {
    int fd = walk_dir(path, 1, &made);
    if (fd < 0) return walk_failed(path);
    close(fd);
  } else {
    char leaf[NAME_MAX + 1];
    int dir = walk_parent(path, 0, leaf, sizeof leaf);
    if (dir < 0) return walk_failed(path);
    if (!leaf[0] || mkdirat(dir, leaf, 0755)) {
      int err = leaf[0] ? errno : EEXIST;
      struct stat st;
      if (err != EEXIST) {
        close(dir);
        return op_fail(err, path, NULL);
      }
      if (leaf[0] && (fstatat(dir, leaf, &st, AT_SYMLINK_NOFOLLOW) || !S_ISDIR(st.st_mode))) {
        close(dir);
        fs_code = FS_NOT_DIR;
        snprintf(fs_err, sizeof fs_err, "%s exists and is not a directory", path);
        return -1;
      }
    } else made = 1;
    close(dir);
  }
  uint8_t m = made ? 1 : 0;
  return send_frame(fs_conn, FRAME_OUT_CREATED, &m, 1);
}

/* Removes what is in directory `fd` (entries, then itself by the caller), following no link. */
static int remove_tree(int fd, const char *rel, int depth) {
  if (depth > 4096) return op_fail(0, rel, "nested too deep");
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return op_fail(errno, rel, NULL);
  }
  struct dirent *e;
  int rc = 0;
  while (!rc && (e = readdir(d))) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    char child[PATH_MAX];
    snprintf(child, sizeof child, "%s/%s", rel, e->d_name);
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW)) continue;
    if (S_ISDIR(st.st_mode)) {
      int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub < 0) rc = op_fail(errno, child, NULL);
      else rc = remove_tree(sub, child, depth + 1);
      if (!rc && unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR)) rc = op_fail(errno, child, NULL);
    } else if (unlinkat(dirfd(d), e->d_name, 0)) rc = op_fail(errno, child, NULL);
  }
  closedir(d);
  return rc;
}

static int op_remove(const char *path, int recursive) {
  char leaf[NAME_MAX + 1];
  int dir = walk_parent(path, 0, leaf, sizeof leaf);
  if (dir < 0) return walk_failed(path);
  int rc = 0;
  struct stat st;
  if (!leaf[0]) rc = op_fail(0, path, "/ cannot be removed");
  else if (fstatat(dir, leaf, &st, AT_SYMLINK_NOFOLLOW)) rc = op_fail(errno, path, NULL);
  else if (!S_ISDIR(st.st_mode)) rc = unlinkat(dir, leaf, 0) ? op_fail(errno, path, NULL) : 0;
  else {
    if (recursive) {
      int fd = openat(dir, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) rc = op_fail(errno, path, NULL);
      else rc = remove_tree(fd, path, 0);
    }
    if (!rc && unlinkat(dir, leaf, AT_REMOVEDIR)) {
      int err = errno;
      rc = op_fail(err, path, err == ENOTEMPTY || err == EEXIST ? "the directory is not empty (remove it recursively)" : NULL);
    }
  }
  close(dir);
  return rc;
}

static int op_rename(const char *from, const char *to) {
  char leaf1[NAME_MAX + 1], leaf2[NAME_MAX + 1];
  int d1 = walk_parent(from, 0, leaf1, sizeof leaf1);
  if (d1 < 0) return walk_failed(from);
  int d2 = walk_parent(to, 0, leaf2, sizeof leaf2);
  if (d2 < 0) {
    close(d1);
    return walk_failed(to);
  }
  int rc = !leaf1[0] || !leaf2[0] ? op_fail(0, from, "/ cannot be moved")
           : renameat(d1, leaf1, d2, leaf2) ? op_fail(errno, from, NULL)
                                            : 0;
  close(d1);
  close(d2);
  return rc;
}

void serve_fsop(int conn) {
  struct fsop_request req;
  if (read_fsop_request(conn, &req)) _exit(1);
  uint32_t op = req.op, flags = req.flags, depth = req.depth;
  char *path = req.path, *path2 = req.to, *user = req.user;
  fs_conn = conn;
  signal(SIGPIPE, SIG_IGN);
  fs_code = FS_OTHER;
  int rc = -1;
  if (user[0]) {
    struct ids ids;
    if (resolve_user(user, &ids, fs_err, sizeof fs_err)) {
      fs_code = FS_NO_USER;
      goto done;
    }
    if (drop_to(&ids)) {
      op_fail(errno, user, NULL);
      goto done;
    }
  }
  umask(022);
  if (path[0] != '/' || (op == OP_RENAME && path2[0] != '/')) {
    op_fail(0, path[0] != '/' ? path : path2, "the path must be absolute");
    goto done;
  }
  switch (op) {
    case OP_STAT: rc = op_stat(path); break;
    case OP_LIST: rc = op_list(path, depth); break;
    case OP_MKDIR: rc = op_mkdir(path, flags & FLAG_FSOP_DEEP); break;
    case OP_REMOVE: rc = op_remove(path, flags & FLAG_FSOP_DEEP); break;
    case OP_RENAME: rc = op_rename(path, path2); break;
    default: op_fail(0, path, "unknown operation");
  }
done:;
  int32_t status = rc ? fs_code : FS_OK;
  if (rc && fs_err[0]) send_frame(conn, FRAME_OUT_STDERR, fs_err, (uint32_t)strlen(fs_err));
  send_status(conn, status);
  shutdown(conn, SHUT_WR);
  _exit(0);
}
