/* Framing on the agent channel: exact reads and writes, strings, lists, frames. */
#include "denv-agent.h"

int read_full(int fd, void *buf, size_t n) {
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

int write_full(int fd, const void *buf, size_t n) {
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

int read_u32(int fd, uint32_t *v) { return read_full(fd, v, 4); }

char *read_str(int fd) {
  uint32_t len;
  if (read_u32(fd, &len) || len > (64u << 20)) return NULL;
  char *s = malloc(len + 1);
  if (!s || read_full(fd, s, len)) return NULL;
  s[len] = 0;
  return s;
}

/* Ends a request: the client may still be writing (stdin it no longer needs), so it is let finish
 * and hang up first, and reads the status instead of a broken pipe. */
void end_request(int conn) {
  shutdown(conn, SHUT_WR);
  char drain[4096];
  struct pollfd p = {conn, POLLIN, 0};
  while (poll(&p, 1, 10000) > 0)
    if (read(conn, drain, sizeof drain) <= 0) break;
  _exit(0);
}

int send_frame(int fd, uint8_t type, const void *data, uint32_t len) {
  char head[5];
  head[0] = (char)type;
  memcpy(head + 1, &len, 4);
  if (write_full(fd, head, 5)) return -1;
  return len ? write_full(fd, data, len) : 0;
}

/* A request's final status record (an exec's exit status, a files request's FS_ code). */
int send_status(int fd, int32_t status) {
  char buf[4];
  struct status_record r = {.status = status};
  return send_frame(fd, FRAME_OUT_STATUS, buf, (uint32_t)put_status_record(buf, sizeof buf, &r));
}

char **read_list_n(int fd, uint32_t count) {
  if (count > 100000) return NULL;
  char **list = calloc(count + 1, sizeof(char *));
  if (!list) return NULL;
  for (uint32_t i = 0; i < count; i++) {
    list[i] = read_str(fd);
    if (!list[i]) return NULL;
  }
  return list;
}

char **read_list(int fd, uint32_t *count) {
  if (read_u32(fd, count)) return NULL;
  return read_list_n(fd, *count);
}

/* Closes every descriptor from `from` up. One close_range call (Linux 5.9) where a loop over the
 * table costs a system call per slot: ≈ 1000 per exec, which measured as a large part of an
 * exec's CPU where system calls are dear (a paravirtualized guest). Older kernels get the loop. */
void close_from(int from) {
  if (syscall(SYS_close_range, (unsigned)from, ~0U, 0) == 0) return;
  for (int fd = from; fd < 1024; fd++) close(fd);
}

/* ---------------------------------------------------------------------------------------------
 * Users, from the container's own files. */

/* Reads a small regular file whole (NUL-terminated); NULL when absent or not a regular file. */
char *read_small_file(const char *path) {
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

/* An errno as an FS_* status. */
int fs_status(int err) {
  switch (err) {
    case ENOENT: return FS_NOT_FOUND;
    case EACCES: case EPERM: case EROFS: return FS_PERMISSION;
    case EISDIR: return FS_IS_DIR;
    case ENOTDIR: return FS_NOT_DIR;
    case EEXIST: return FS_EXISTS;
    case ENOSPC: case EDQUOT: return FS_NO_SPACE;
    case ENOTEMPTY: return FS_NOT_EMPTY;
    case ELOOP: return FS_LINK;
    case ENAMETOOLONG: case EINVAL: return FS_INVALID;
    default: return FS_OTHER;
  }
}
