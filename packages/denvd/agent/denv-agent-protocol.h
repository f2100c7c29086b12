/* Generated from packages/denvd/src/exec/agent-protocol.ts: do not edit; run
 * `node packages/denvd/src/exec/agent-protocol.ts` after changing the table there. */
#ifndef DENV_AGENT_PROTOCOL_H
#define DENV_AGENT_PROTOCOL_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PROTOCOL_VERSION 3

#define MODE_PORT 0xffffffffu
#define MODE_FILES 0xfffffffeu
#define MODE_PUT 0xfffffffdu
#define MODE_FSOP 0xfffffffcu

#define FRAME_IN_DATA 0
#define FRAME_IN_END 1
#define FRAME_IN_RESIZE 2
#define FRAME_IN_KILL 9

#define FRAME_OUT_STDOUT 1
#define FRAME_OUT_STDERR 2
#define FRAME_OUT_STATUS 3
#define FRAME_OUT_ENTRIES 4
#define FRAME_OUT_CREATED 5

#define OP_STAT 1
#define OP_LIST 2
#define OP_MKDIR 3
#define OP_REMOVE 4
#define OP_RENAME 5

#define FS_OK 0
#define FS_NOT_FOUND 1
#define FS_PERMISSION 2
#define FS_IS_DIR 3
#define FS_NOT_DIR 4
#define FS_EXISTS 5
#define FS_NO_SPACE 6
#define FS_INVALID 7
#define FS_OTHER 8
#define FS_NOT_EMPTY 9
#define FS_NO_USER 10
#define FS_LINK 11

#define FLAG_EXEC_HOME 1
#define FLAG_EXEC_CLEAN_ENV 2
#define FLAG_EXEC_TTY 4
#define FLAG_PUT_KEEP_OWNERS 1
#define FLAG_FSOP_DEEP 1

#define BTRFS_BUILTIN "denv-agent:btrfs"
#define RELAY_MAGIC 0x45564e44u

/* agent-io.c's readers, which the request readers below use. */
int read_full(int fd, void *buf, size_t n);
int read_u32(int fd, uint32_t *v);
char *read_str(int fd);
char **read_list_n(int fd, uint32_t count);
char **read_list(int fd, uint32_t *count);

struct exec_request {
  uint32_t argv_count;
  char **argv;
  uint32_t env_count;
  char **env;
  char *cwd;
  char *user;
  uint32_t flags;
  uint32_t rows;
  uint32_t cols;
};
/* The rest of an exec request (first: argv's count, its first word): 0, or -1 when it is cut short or too large. */
static inline int read_exec_request(int fd, uint32_t first, struct exec_request *r) {
  r->argv_count = first;
  if (!(r->argv = read_list_n(fd, first))) return -1;
  if (!(r->env = read_list(fd, &r->env_count))) return -1;
  if (!(r->cwd = read_str(fd))) return -1;
  if (!(r->user = read_str(fd))) return -1;
  if (read_u32(fd, &r->flags)) return -1;
  if (read_u32(fd, &r->rows)) return -1;
  if (read_u32(fd, &r->cols)) return -1;
  return 0;
}

struct port_request {
  uint32_t port;
};
/* The rest of a MODE_PORT request: 0, or -1 when it is cut short or too large. */
static inline int read_port_request(int fd, struct port_request *r) {
  if (read_u32(fd, &r->port)) return -1;
  return 0;
}

struct files_request {
  char *path;
  char *user;
};
/* The rest of a MODE_FILES request: 0, or -1 when it is cut short or too large. */
static inline int read_files_request(int fd, struct files_request *r) {
  if (!(r->path = read_str(fd))) return -1;
  if (!(r->user = read_str(fd))) return -1;
  return 0;
}

struct put_request {
  char *path;
  char *user;
  uint32_t flags;
};
/* The rest of a MODE_PUT request: 0, or -1 when it is cut short or too large. */
static inline int read_put_request(int fd, struct put_request *r) {
  if (!(r->path = read_str(fd))) return -1;
  if (!(r->user = read_str(fd))) return -1;
  if (read_u32(fd, &r->flags)) return -1;
  return 0;
}

struct fsop_request {
  uint32_t op;
  char *path;
  char *to;
  char *user;
  uint32_t flags;
  uint32_t depth;
};
/* The rest of a MODE_FSOP request: 0, or -1 when it is cut short or too large. */
static inline int read_fsop_request(int fd, struct fsop_request *r) {
  if (read_u32(fd, &r->op)) return -1;
  if (!(r->path = read_str(fd))) return -1;
  if (!(r->to = read_str(fd))) return -1;
  if (!(r->user = read_str(fd))) return -1;
  if (read_u32(fd, &r->flags)) return -1;
  if (read_u32(fd, &r->depth)) return -1;
  return 0;
}

struct relay_hello_record {
  uint32_t magic;
  uint32_t addr;
  uint32_t port;
};
/* One relay_hello record's bytes in buf: their length, or -1 when they do not fit in room. */
static inline int put_relay_hello_record(char *buf, size_t room, const struct relay_hello_record *v) {
  size_t off = 0;
  if (off + sizeof v->magic > room) return -1;
  memcpy(buf + off, &v->magic, sizeof v->magic), off += sizeof v->magic;
  if (off + sizeof v->addr > room) return -1;
  memcpy(buf + off, &v->addr, sizeof v->addr), off += sizeof v->addr;
  if (off + sizeof v->port > room) return -1;
  memcpy(buf + off, &v->port, sizeof v->port), off += sizeof v->port;
  return (int)off;
}

/* One relay_hello record from buf: 0, or -1 when len holds less than one. */
static inline int get_relay_hello_record(const char *buf, size_t len, struct relay_hello_record *v) {
  size_t off = 0;
  if (off + sizeof v->magic > len) return -1;
  memcpy(&v->magic, buf + off, sizeof v->magic), off += sizeof v->magic;
  if (off + sizeof v->addr > len) return -1;
  memcpy(&v->addr, buf + off, sizeof v->addr), off += sizeof v->addr;
  if (off + sizeof v->port > len) return -1;
  memcpy(&v->port, buf + off, sizeof v->port), off += sizeof v->port;
  return 0;
}

struct status_record {
  int32_t status;
};
/* One status record's bytes in buf: their length, or -1 when they do not fit in room. */
static inline int put_status_record(char *buf, size_t room, const struct status_record *v) {
  size_t off = 0;
  if (off + sizeof v->status > room) return -1;
  memcpy(buf + off, &v->status, sizeof v->status), off += sizeof v->status;
  return (int)off;
}

/* One status record from buf: 0, or -1 when len holds less than one. */
static inline int get_status_record(const char *buf, size_t len, struct status_record *v) {
  size_t off = 0;
  if (off + sizeof v->status > len) return -1;
  memcpy(&v->status, buf + off, sizeof v->status), off += sizeof v->status;
  return 0;
}

struct winsize_record {
  uint32_t rows;
  uint32_t cols;
};
/* One winsize record's bytes in buf: their length, or -1 when they do not fit in room. */
static inline int put_winsize_record(char *buf, size_t room, const struct winsize_record *v) {
  size_t off = 0;
  if (off + sizeof v->rows > room) return -1;
  memcpy(buf + off, &v->rows, sizeof v->rows), off += sizeof v->rows;
  if (off + sizeof v->cols > room) return -1;
  memcpy(buf + off, &v->cols, sizeof v->cols), off += sizeof v->cols;
  return (int)off;
}

/* One winsize record from buf: 0, or -1 when len holds less than one. */
static inline int get_winsize_record(const char *buf, size_t len, struct winsize_record *v) {
  size_t off = 0;
  if (off + sizeof v->rows > len) return -1;
  memcpy(&v->rows, buf + off, sizeof v->rows), off += sizeof v->rows;
  if (off + sizeof v->cols > len) return -1;
  memcpy(&v->cols, buf + off, sizeof v->cols), off += sizeof v->cols;
  return 0;
}

struct put_status_record {
  int32_t status;
  uint32_t entries;
  uint64_t bytes;
};
/* One put_status record's bytes in buf: their length, or -1 when they do not fit in room. */
static inline int put_put_status_record(char *buf, size_t room, const struct put_status_record *v) {
  size_t off = 0;
  if (off + sizeof v->status > room) return -1;
  memcpy(buf + off, &v->status, sizeof v->status), off += sizeof v->status;
  if (off + sizeof v->entries > room) return -1;
  memcpy(buf + off, &v->entries, sizeof v->entries), off += sizeof v->entries;
  if (off + sizeof v->bytes > room) return -1;
  memcpy(buf + off, &v->bytes, sizeof v->bytes), off += sizeof v->bytes;
  return (int)off;
}

/* One put_status record from buf: 0, or -1 when len holds less than one. */
static inline int get_put_status_record(const char *buf, size_t len, struct put_status_record *v) {
  size_t off = 0;
  if (off + sizeof v->status > len) return -1;
  memcpy(&v->status, buf + off, sizeof v->status), off += sizeof v->status;
  if (off + sizeof v->entries > len) return -1;
  memcpy(&v->entries, buf + off, sizeof v->entries), off += sizeof v->entries;
  if (off + sizeof v->bytes > len) return -1;
  memcpy(&v->bytes, buf + off, sizeof v->bytes), off += sizeof v->bytes;
  return 0;
}

struct entry_record {
  uint8_t type;
  uint32_t mode;
  uint32_t uid;
  uint32_t gid;
  uint64_t size;
  int64_t mtime;
  uint32_t nsec;
  const char *name;
  const char *link;
  const char *owner;
  const char *group;
};
/* One entry record's bytes in buf: their length, or -1 when they do not fit in room. */
static inline int put_entry_record(char *buf, size_t room, const struct entry_record *v) {
  size_t off = 0;
  uint32_t len;
  if (off + sizeof v->type > room) return -1;
  memcpy(buf + off, &v->type, sizeof v->type), off += sizeof v->type;
  if (off + sizeof v->mode > room) return -1;
  memcpy(buf + off, &v->mode, sizeof v->mode), off += sizeof v->mode;
  if (off + sizeof v->uid > room) return -1;
  memcpy(buf + off, &v->uid, sizeof v->uid), off += sizeof v->uid;
  if (off + sizeof v->gid > room) return -1;
  memcpy(buf + off, &v->gid, sizeof v->gid), off += sizeof v->gid;
  if (off + sizeof v->size > room) return -1;
  memcpy(buf + off, &v->size, sizeof v->size), off += sizeof v->size;
  if (off + sizeof v->mtime > room) return -1;
  memcpy(buf + off, &v->mtime, sizeof v->mtime), off += sizeof v->mtime;
  if (off + sizeof v->nsec > room) return -1;
  memcpy(buf + off, &v->nsec, sizeof v->nsec), off += sizeof v->nsec;
  len = (uint32_t)strlen(v->name);
  if (off + 4 + (size_t)len > room) return -1;
  memcpy(buf + off, &len, 4), off += 4;
  memcpy(buf + off, v->name, len), off += len;
  len = (uint32_t)strlen(v->link);
  if (off + 4 + (size_t)len > room) return -1;
  memcpy(buf + off, &len, 4), off += 4;
  memcpy(buf + off, v->link, len), off += len;
  len = (uint32_t)strlen(v->owner);
  if (off + 4 + (size_t)len > room) return -1;
  memcpy(buf + off, &len, 4), off += 4;
  memcpy(buf + off, v->owner, len), off += len;
  len = (uint32_t)strlen(v->group);
  if (off + 4 + (size_t)len > room) return -1;
  memcpy(buf + off, &len, 4), off += 4;
  memcpy(buf + off, v->group, len), off += len;
  return (int)off;
}

#endif
