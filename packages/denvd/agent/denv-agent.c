/*
 * denv-agent: runs inside a sandbox so that an exec does not pay for a runc exec. denvd starts it
 * once per container (one engine exec) and then talks to it over a unix socket in a directory only
 * root can enter. Statically linked: it needs nothing from the image.
 *
 * Protocol, per connection (all integers little-endian u32):
 *   request:  argc, argc x (len, bytes); envc, envc x (len, "K=V"); len, cwd (0: none);
 *             uid, gid (0xffffffff: keep the agent's)
 *   then frames both ways: u8 type, u32 len, bytes
 *     client -> agent: 0 stdin data, 1 stdin end, 9 kill the process tree
 *     agent -> client: 1 stdout, 2 stderr, 3 exit (4 bytes: the status, 128+N for signal N)
 * A client that goes away kills the command's whole process group.
 *
 * Port mode: a request whose argc is 0xffffffff is followed by a port (u32). The agent connects to
 * 127.0.0.1:port inside the container's network namespace, answers one status byte (0, or the
 * connect errno), then relays raw bytes both ways until both directions are closed. This is how a
 * client reaches a service's port without the container being reachable from the host network.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* The command's environment: the agent's own (the container's), with the request's on top. */
static char **merge_env(char **extra, uint32_t n) {
  size_t base = 0;
  while (environ[base]) base++;
  char **env = calloc(base + n + 1, sizeof(char *));
  size_t k = 0;
  for (size_t i = 0; i < base; i++) {
    int overridden = 0;
    size_t klen = strcspn(environ[i], "=");
    for (uint32_t j = 0; j < n; j++)
      if (strncmp(extra[j], environ[i], klen) == 0 && extra[j][klen] == '=') overridden = 1;
    if (!overridden) env[k++] = environ[i];
  }
  for (uint32_t j = 0; j < n; j++) env[k++] = extra[j];
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

static void serve(int conn) {
  uint32_t argc, envc, uid, gid;
  if (read_u32(conn, &argc)) _exit(1);
  if (argc == 0xffffffffu) serve_port(conn);
  char **argv = read_list_n(conn, argc);
  char **extra = argv ? read_list(conn, &envc) : NULL;
  char *cwd = extra ? read_str(conn) : NULL;
  if (!argv || !extra || !cwd || argc == 0 || read_u32(conn, &uid) || read_u32(conn, &gid)) _exit(1);
  int in[2], out[2], err[2];
  if (pipe(in) || pipe(out) || pipe(err)) _exit(1);
  pid_t pid = fork();
  if (pid == 0) {
    setsid(); /* its own process group: a kill reaches every descendant */
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    for (int fd = 3; fd < 1024; fd++) close(fd);
    if (gid != 0xffffffffu && (setgroups(0, NULL) || setgid(gid))) _exit(126);
    if (uid != 0xffffffffu && setuid(uid)) _exit(126);
    if (cwd[0] && chdir(cwd)) {
      fprintf(stderr, "denv-agent: chdir %s: %s\n", cwd, strerror(errno));
      _exit(126);
    }
    char **env = merge_env(extra, envc);
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

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: denv-agent SOCKET\n");
    return 2;
  }
  signal(SIGCHLD, SIG_IGN); /* connection handlers are reaped by the kernel */
  unlink(argv[1]);
  int srv = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  strncpy(addr.sun_path, argv[1], sizeof addr.sun_path - 1);
  /* The socket is created owner-only; commands get the container's own umask back (as with
     `docker exec`), or every file they create would be private. */
  mode_t old_mask = umask(077);
  if (srv < 0 || bind(srv, (struct sockaddr *)&addr, sizeof addr) || listen(srv, 128)) {
    perror("denv-agent: listen");
    return 1;
  }
  umask(old_mask);
  for (;;) {
    int conn = accept4(srv, NULL, NULL, SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    pid_t h = fork();
    if (h == 0) {
      close(srv);
      signal(SIGCHLD, SIG_DFL); /* the handler waits for its own command */
      serve(conn);
    }
    close(conn);
  }
}
