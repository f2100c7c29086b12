/*
 * What the parts of denv-agent share (see denv-agent.c for what the agent is and its protocol):
 * framing on the channel (agent-io.c), users and groups read from the container's own files
 * (agent-users.c), port relays (agent-ports.c) and tars of paths that never follow a link
 * (agent-files.c).
 */
#ifndef DENV_AGENT_H
#define DENV_AGENT_H
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* The channel's numbers (modes, frame types, files operations and statuses), generated. */
#include "denv-agent-protocol.h"

#ifndef SYS_close_range
#define SYS_close_range 436 /* the same number on every architecture since Linux 5.9 */
#endif

#define MAX_IDS_FILE (1 << 20)
#define MAX_GROUPS 64

extern char **environ;

struct ids {
  uid_t uid;
  gid_t gid;
  char home[1024];
  char name[256];
  int have_entry;
  gid_t groups[MAX_GROUPS];
  int ngroups;
};

/* agent-io.c (its readers are declared in denv-agent-protocol.h) */
int write_full(int fd, const void *buf, size_t n);
int send_frame(int fd, uint8_t type, const void *data, uint32_t len);
int send_status(int fd, int32_t status);
void end_request(int conn) __attribute__((noreturn));
char *read_small_file(const char *path);
void close_from(int from);

/* agent-users.c */
int resolve_user(const char *spec, struct ids *out, char *err, size_t errlen);
int drop_to(const struct ids *ids);
char **merge_env(char **extra, uint32_t n, const char *home, const char *name, int clean);
void group_name_of(gid_t gid, char *buf, size_t len);

/* agent-ports.c */
void relay(int a, int b);

/* agent-relay.c */
int run_relay(const char *port, const char *socket_path);
void serve_port(int conn);

/* agent-files.c */
void serve_files(int conn);

/* agent-put.c */
void serve_put(int conn);

/* agent-fsops.c */
void serve_fsop(int conn);

/* agent-btrfs.c: an exec request naming BTRFS_BUILTIN, in host mode (host_mode set) */
extern int host_mode;
void serve_btrfs(int conn, uint32_t argc, char **argv);

/*
 * agent-walk.c: directories opened component by component, no link followed. Each returns an fd
 * or -1 with walk_status (FS_*) and walk_err (naming the component) set. `create` makes missing
 * directories (0755, the caller's); *made says whether the last one was made.
 */
extern char walk_err[1024];
extern int walk_status;
/* `rel` (relative, '/'-separated) under directory `base`, which errors name `shown_base`. */
int walk_dir_at(int base, const char *shown_base, const char *rel, int create, int *made);
/* The directory absolute `path` names. */
int walk_dir(const char *path, int create, int *made);
/* The directory holding absolute `path`'s last component, which is copied to `leaf` ("" for "/"). */
int walk_parent(const char *path, int create, char *leaf, size_t leaflen);

int fs_status(int err);

#endif
