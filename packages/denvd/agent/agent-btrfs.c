/*
 * The host agent's btrfs operations, done with the filesystem's ioctls in the request's handler
 * instead of by starting `btrfs` (host mode only).
 *
 * Why: a create asks for five of them (the dataset made, its quota read and capped, a flush, the
 * first version's snapshot) and a fork more. Each `btrfs` is a dynamically linked program loaded
 * into a new process, 5-15 ms of CPU apiece on a paravirtualized guest; the ioctl itself is a
 * fraction of that. They are the same calls `btrfs` makes (btrfs-progs: subvolume create and
 * snapshot, qgroup show and limit, filesystem sync, subvolume delete).
 *
 * Request: an exec whose argv[0] is BTRFS_BUILTIN, then the operation and its arguments:
 *   subvolume-create PATH          a subvolume at PATH (its parent must exist)
 *   snapshot ro|rw SOURCE PATH     a snapshot of subvolume SOURCE at PATH, read-only or writable
 *   subvolume-delete PATH          the subvolume at PATH
 *   sync PATH                      the filesystem holding PATH committed to disk
 *   limit-growth BYTES PATH        the subvolume's own qgroup (0/ID) capped at what it references
 *                                  now plus BYTES; prints "REFERENCED LIMIT"
 * Answered as an exec is: stdout, stderr (a message naming the operation and path) and the status
 * (0, or 1 on failure, 2 for a request it does not know).
 *
 * Paths come from denvd (root, its own pool's directories). Still, the last component must be a
 * plain name, and the subvolume a path names is opened without following a link there.
 */
#include "denv-agent.h"

#include <endian.h>
#include <sys/ioctl.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>

static int bt_conn;

__attribute__((noreturn)) static void finish(int code, const char *out, const char *err) {
  if (out && out[0]) send_frame(bt_conn, FRAME_OUT_STDOUT, out, (uint32_t)strlen(out));
  if (err && err[0]) send_frame(bt_conn, FRAME_OUT_STDERR, err, (uint32_t)strlen(err));
  int32_t status = code;
  send_status(bt_conn, status);
  end_request(bt_conn);
}

__attribute__((noreturn)) static void fail(const char *op, const char *path, int err) {
  char msg[PATH_MAX + 256];
  snprintf(msg, sizeof msg, "%s %s: %s\n", op, path, strerror(err));
  finish(1, NULL, msg);
}

/* The directory holding `path` (opened, not following a link in its last component) and the
 * path's last component, which must be a plain name that fits a btrfs volume name. */
static int open_parent(const char *op, const char *path, char *leaf, size_t leaflen) {
  const char *slash = strrchr(path, '/');
  const char *name = slash ? slash + 1 : path;
  size_t n = strlen(name);
  if (path[0] != '/' || !n || n >= leaflen || !strcmp(name, ".") || !strcmp(name, "..")) fail(op, path, EINVAL);
  memcpy(leaf, name, n + 1);
  char dir[PATH_MAX];
  size_t dn = (size_t)(slash - path);
  if (dn >= sizeof dir) fail(op, path, ENAMETOOLONG);
  memcpy(dir, path, dn);
  dir[dn ? dn : 1] = 0;
  if (!dn) dir[0] = '/';
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail(op, path, errno);
  return fd;
}

/* A directory of the filesystem itself, never through a link at its name; with `root`, one that
 * is a subvolume's root (inode 256), not a directory inside one. */
static int open_volume(const char *op, const char *path, int root) {
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) fail(op, path, errno);
  struct stat st;
  if (root && (fstat(fd, &st) || st.st_ino != BTRFS_FIRST_FREE_OBJECTID)) fail(op, path, EINVAL);
  return fd;
}

static void subvolume_create(const char *path) {
  struct btrfs_ioctl_vol_args args;
  memset(&args, 0, sizeof args);
  int dir = open_parent("subvolume-create", path, args.name, sizeof args.name);
  if (ioctl(dir, BTRFS_IOC_SUBVOL_CREATE, &args)) fail("subvolume-create", path, errno);
  finish(0, NULL, NULL);
}

static void snapshot(const char *mode, const char *source, const char *path) {
  struct btrfs_ioctl_vol_args_v2 args;
  memset(&args, 0, sizeof args);
  if (strcmp(mode, "ro") && strcmp(mode, "rw")) fail("snapshot", mode, EINVAL);
  int src = open_volume("snapshot", source, 1);
  int dir = open_parent("snapshot", path, args.name, sizeof args.name);
  args.fd = src;
  if (!strcmp(mode, "ro")) args.flags = BTRFS_SUBVOL_RDONLY;
  if (ioctl(dir, BTRFS_IOC_SNAP_CREATE_V2, &args)) fail("snapshot", path, errno);
  finish(0, NULL, NULL);
}

static void subvolume_delete(const char *path) {
  struct btrfs_ioctl_vol_args args;
  memset(&args, 0, sizeof args);
  int dir = open_parent("subvolume-delete", path, args.name, sizeof args.name);
  /* What the name holds must be a subvolume (its root is inode 256), not a directory or a link. */
  struct stat st;
  if (fstatat(dir, args.name, &st, AT_SYMLINK_NOFOLLOW)) fail("subvolume-delete", path, errno);
  if (!S_ISDIR(st.st_mode) || st.st_ino != BTRFS_FIRST_FREE_OBJECTID) fail("subvolume-delete", path, EINVAL);
  if (ioctl(dir, BTRFS_IOC_SNAP_DESTROY, &args)) fail("subvolume-delete", path, errno);
  finish(0, NULL, NULL);
}

static void sync_fs(const char *path) {
  int fd = open_volume("sync", path, 0);
  if (ioctl(fd, BTRFS_IOC_SYNC, NULL)) fail("sync", path, errno);
  finish(0, NULL, NULL);
}

static void limit_growth(const char *bytes, const char *path) {
  char *end;
  errno = 0;
  unsigned long long growth = strtoull(bytes, &end, 10);
  if (errno || end == bytes || *end || bytes[0] == '-') fail("limit-growth", bytes, EINVAL);
  int fd = open_volume("limit-growth", path, 1);
  /* The subvolume's id: the tree its root directory (inode 256) belongs to. */
  struct btrfs_ioctl_ino_lookup_args look;
  memset(&look, 0, sizeof look);
  look.objectid = BTRFS_FIRST_FREE_OBJECTID;
  if (ioctl(fd, BTRFS_IOC_INO_LOOKUP, &look)) fail("limit-growth", path, errno);
  /* Its qgroup's info item, (0, QGROUP_INFO, 0/ID) in the quota tree, as `btrfs qgroup show`
   * reads it. */
  struct btrfs_ioctl_search_args search;
  memset(&search, 0, sizeof search);
  struct btrfs_ioctl_search_key *key = &search.key;
  key->tree_id = BTRFS_QUOTA_TREE_OBJECTID;
  key->min_type = key->max_type = BTRFS_QGROUP_INFO_KEY;
  key->min_offset = key->max_offset = look.treeid; /* level 0: the id itself */
  key->max_transid = (uint64_t)-1;
  key->nr_items = 1;
  if (ioctl(fd, BTRFS_IOC_TREE_SEARCH, &search)) fail("limit-growth", path, errno);
  struct btrfs_ioctl_search_header head;
  memcpy(&head, search.buf, sizeof head);
  struct btrfs_qgroup_info_item info;
  if (key->nr_items != 1 || head.type != BTRFS_QGROUP_INFO_KEY || head.offset != look.treeid ||
      head.len < sizeof info)
    fail("limit-growth", path, ENOENT); /* quotas off, or no qgroup for it */
  memcpy(&info, search.buf + sizeof head, sizeof info);
  unsigned long long referenced = le64toh(info.rfer);
  if (growth > UINT64_MAX - referenced) fail("limit-growth", bytes, ERANGE);
  struct btrfs_ioctl_qgroup_limit_args lim;
  memset(&lim, 0, sizeof lim);
  lim.qgroupid = 0; /* the subvolume fd is in */
  lim.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
  lim.lim.max_rfer = referenced + growth;
  if (ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &lim)) fail("limit-growth", path, errno);
  char out[64];
  snprintf(out, sizeof out, "%llu %llu\n", referenced, referenced + growth);
  finish(0, out, NULL);
}

void serve_btrfs(int conn, uint32_t argc, char **argv) {
  bt_conn = conn;
  signal(SIGPIPE, SIG_IGN);
  const char *op = argc > 1 ? argv[1] : "";
  if (!strcmp(op, "subvolume-create") && argc == 3) subvolume_create(argv[2]);
  if (!strcmp(op, "snapshot") && argc == 5) snapshot(argv[2], argv[3], argv[4]);
  if (!strcmp(op, "subvolume-delete") && argc == 3) subvolume_delete(argv[2]);
  if (!strcmp(op, "sync") && argc == 3) sync_fs(argv[2]);
  if (!strcmp(op, "limit-growth") && argc == 4) limit_growth(argv[2], argv[3]);
  char msg[512];
  snprintf(msg, sizeof msg, "%s: unknown operation or wrong arguments: %.200s\n", BTRFS_BUILTIN, op);
  finish(2, NULL, msg);
}
