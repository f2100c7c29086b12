/*
 * Walking a path inside the container one component at a time, never following a link: each step
 * is an openat(O_NOFOLLOW | O_DIRECTORY) relative to the directory before it, so a link met where a
 * directory is expected — planted before the operation or swapped in while it runs — is refused
 * with FS_LINK naming that component, never followed to somewhere the path does not name. Every
 * file operation (get, put and the parents it makes, stat, list, mkdir, remove, rename) starts
 * here, as whichever user it runs as: root included.
 */
#include "denv-agent.h"

char walk_err[1024];
int walk_status;

static int walk_fail(int status, const char *shown, const char *why) {
  walk_status = status;
  snprintf(walk_err, sizeof walk_err, "%s%s", shown[0] ? shown : "/", why);
  return -1;
}

/* Opens directory `comp` in `dir`, making it first when `create` (then *made is 1). */
static int step(int dir, const char *comp, const char *shown, int create, int *made) {
  if (made) *made = 0;
  int fd = openat(dir, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && create) {
    if (!mkdirat(dir, comp, 0755)) {
      if (made) *made = 1;
    } else if (errno != EEXIST) {
      int err = errno;
      char why[300];
      snprintf(why, sizeof why, ": %s", strerror(err));
      return walk_fail(fs_status(err), shown, why);
    }
    fd = openat(dir, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd >= 0) return fd;
  int err = errno;
  struct stat st;
  if (!fstatat(dir, comp, &st, AT_SYMLINK_NOFOLLOW)) {
    if (S_ISLNK(st.st_mode))
      return walk_fail(FS_LINK, shown,
                       " is a symbolic link; denv does not follow links in a path (use the link's target)");
    if (!S_ISDIR(st.st_mode)) return walk_fail(FS_NOT_DIR, shown, " is a file, not a directory");
  }
  char why[300];
  snprintf(why, sizeof why, ": %s", strerror(err));
  return walk_fail(fs_status(err), shown, why);
}

int walk_dir_at(int base, const char *shown_base, const char *rel, int create, int *made) {
  char buf[PATH_MAX], shown[PATH_MAX + 256];
  if (made) *made = 0;
  if (strlen(rel) >= sizeof buf) return walk_fail(FS_INVALID, shown_base, ": the path is too long");
  snprintf(buf, sizeof buf, "%s", rel);
  snprintf(shown, sizeof shown, "%s", shown_base);
  int cur = dup(base);
  if (cur < 0) return walk_fail(fs_status(errno), shown_base, ": cannot open");
  char *save = NULL;
  for (char *comp = strtok_r(buf, "/", &save); comp; comp = strtok_r(NULL, "/", &save)) {
    size_t sl = strlen(shown);
    snprintf(shown + sl, sizeof shown - sl, "/%s", comp);
    if (!strcmp(comp, ".") || !strcmp(comp, "..")) {
      close(cur);
      return walk_fail(FS_INVALID, shown, ": the path must not contain . or ..");
    }
    int fd = step(cur, comp, shown, create, made);
    close(cur);
    if (fd < 0) return -1;
    cur = fd;
  }
  return cur;
}

int walk_parent(const char *path, int create, char *leaf, size_t leaflen) {
  if (path[0] != '/') return walk_fail(FS_INVALID, path, ": the path must be absolute");
  size_t len = strlen(path);
  while (len > 1 && path[len - 1] == '/') len--;
  char dir[PATH_MAX];
  if (len >= sizeof dir) return walk_fail(FS_INVALID, path, ": the path is too long");
  memcpy(dir, path, len);
  dir[len] = 0;
  char *slash = strrchr(dir, '/');
  const char *name = slash + 1;
  if (strlen(name) >= leaflen) return walk_fail(FS_INVALID, path, ": the name is too long");
  snprintf(leaf, leaflen, "%s", name);
  if (!strcmp(leaf, ".") || !strcmp(leaf, ".."))
    return walk_fail(FS_INVALID, path, ": the path must not contain . or ..");
  /* The parent, relative to /: "" for a name right under / (the slash is the first character). */
  const char *parent = slash == dir ? "" : dir + 1;
  *slash = 0;
  int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return walk_fail(fs_status(errno), "/", ": cannot open");
  int fd = walk_dir_at(root, "", parent, create, NULL);
  close(root);
  return fd;
}

int walk_dir(const char *path, int create, int *made) {
  if (path[0] != '/') return walk_fail(FS_INVALID, path, ": the path must be absolute");
  int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return walk_fail(fs_status(errno), "/", ": cannot open");
  int fd = walk_dir_at(root, "", path + 1, create, made);
  close(root);
  return fd;
}
