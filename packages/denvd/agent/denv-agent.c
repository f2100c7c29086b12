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
 * Requests (their layouts, structs and readers: denv-agent-protocol.h, generated from denvd's
 * table in src/exec/agent-protocol.ts):
 *   exec:   argv, env ("K=V"), cwd ("": none), user ("name|uid[:group|gid]", "": the agent's own,
 *           root), flags (FLAG_EXEC_HOME: set HOME from the user's passwd entry, as `docker exec`
 *           does when the container sets none; FLAG_EXEC_CLEAN_ENV: start from the request's
 *           variables alone, none of the container's — graders)
 *   then frames both ways: u8 type, u32 len, bytes (the types: denv-agent-protocol.h, generated
 *   from denvd's table in src/exec/agent-protocol.ts)
 *     client -> agent: FRAME_IN_DATA stdin, FRAME_IN_END its end, FRAME_IN_KILL the process tree
 *     agent -> client: FRAME_OUT_STDOUT, FRAME_OUT_STDERR, FRAME_OUT_STATUS (4 bytes: the exit
 *     status, 128+N for signal N)
 *   A client that goes away kills the command's whole process group.
 *
 * relay mode (agent-relay.c) is an environment's egress gateway, not a sandbox's agent.
 *
 *   port:   MODE_PORT, port. The agent connects to 127.0.0.1:port inside the container's network
 *           namespace, answers one status byte (0, or the connect errno), then relays raw bytes.
 *
 *   files:  MODE_FILES, len, path, len, user. A tar of the path, written as frames FRAME_OUT_STDOUT
 *           (tar bytes), FRAME_OUT_STDERR (an error message) and FRAME_OUT_STATUS (an FS_ status). The path is walked
 *           one component at a time without following any link; links inside are archived as
 *           links; FIFOs and devices as their headers only (never opened); sockets skipped.
 *
 * Users and groups are resolved here, inside the container, from its own /etc/passwd and
 * /etc/group (read as regular files of at most 1 MiB, never blocking): denvd never reads a path
 * the container can change. Statically linked: it needs nothing from the image.
 */
#include "denv-agent.h"

/*
 * Kills every process the command started, wherever it went: this handler is a subreaper, so a
 * process that called setsid or double-forked is still its descendant (or, orphaned, its child).
 * The tree is read from /proc until nothing of it is left.
 */
static pid_t cmd_pid;
static int cmd_status, cmd_reaped;

/* Reaps what has died, keeping the command's own status when it is among them. */
static void reap(void) {
  int st;
  pid_t w;
  while ((w = waitpid(-1, &st, WNOHANG)) > 0)
    if (w == cmd_pid) cmd_status = st, cmd_reaped = 1;
}

static void kill_tree(void) {
  pid_t self = getpid();
  for (int round = 0; round < 100; round++) {
    enum { MAX = 8192 };
    static pid_t pids[MAX], parents[MAX];
    int n = 0;
    DIR *d = opendir("/proc");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) && n < MAX) {
      char *end;
      long pid = strtol(e->d_name, &end, 10);
      if (*end || pid <= 0) continue;
      char path[64], buf[512];
      snprintf(path, sizeof path, "/proc/%ld/stat", pid);
      int fd = open(path, O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      ssize_t r = read(fd, buf, sizeof buf - 1);
      close(fd);
      if (r <= 0) continue;
      buf[r] = 0;
      /* "pid (comm) state ppid": comm may hold spaces and parentheses; the last ')' ends it. */
      char *close_paren = strrchr(buf, ')');
      long ppid = 0;
      if (!close_paren || sscanf(close_paren + 1, " %*c %ld", &ppid) != 1) continue;
      pids[n] = (pid_t)pid;
      parents[n++] = (pid_t)ppid;
    }
    closedir(d);
    /* Descendants of this handler: its children, then theirs, found by repeated passes. */
    static char mark[MAX];
    memset(mark, 0, (size_t)n);
    int found = 0, grew = 1;
    while (grew) {
      grew = 0;
      for (int i = 0; i < n; i++) {
        if (mark[i]) continue;
        int child = parents[i] == self;
        for (int j = 0; j < n && !child; j++) child = mark[j] && parents[i] == pids[j];
        if (child) mark[i] = 1, grew = 1, found++;
      }
    }
    if (!found) return;
    for (int i = 0; i < n; i++)
      if (mark[i]) kill(pids[i], SIGKILL);
    /* Reap what died here; what died elsewhere is reparented to this handler and reaped next round. */
    reap();
    struct timespec ts = {0, 5 * 1000000L};
    nanosleep(&ts, NULL);
    reap();
  }
}

static void serve(int conn) {
  uint32_t first;
  if (read_u32(conn, &first)) _exit(1);
  if (first == MODE_PORT) serve_port(conn);
  if (first == MODE_FILES) serve_files(conn);
  if (first == MODE_PUT) serve_put(conn);
  if (first == MODE_FSOP) serve_fsop(conn);
  /* Anything else is an exec, whose first word is argv's count. */
  struct exec_request req;
  if (first == 0 || read_exec_request(conn, first, &req)) _exit(1);
  uint32_t argc = req.argv_count, envc = req.env_count, flags = req.flags;
  char **argv = req.argv, **extra = req.env, *cwd = req.cwd, *user = req.user;
  if (host_mode && strcmp(argv[0], BTRFS_BUILTIN) == 0) serve_btrfs(conn, argc, argv);
  int tty = (flags & FLAG_EXEC_TTY) != 0;
  int in[2], out[2], err[2];
  /* With a terminal: a pseudo-terminal whose side the command gets as stdin, stdout and stderr
   * (and as its session's controlling terminal); the agent holds the other side, as both the
   * command's stdin and its one output. Without: three pipes. */
  int master = -1, slave = -1;
  if (tty) {
    char slave_name[128];
    master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0 || grantpt(master) || unlockpt(master) || ptsname_r(master, slave_name, sizeof slave_name)) _exit(1);
    slave = open(slave_name, O_RDWR | O_NOCTTY);
    if (slave < 0) _exit(1);
    struct winsize ws = {.ws_row = (unsigned short)(req.rows ? req.rows : 24), .ws_col = (unsigned short)(req.cols ? req.cols : 80)};
    ioctl(master, TIOCSWINSZ, &ws);
    in[0] = out[1] = err[1] = slave;
    in[1] = master;
    out[0] = dup(master);
    err[0] = -1;
  } else if (pipe(in) || pipe(out) || pipe(err)) _exit(1);
  /* Whatever the command starts stays this handler's descendant, setsid or not (see kill_tree). */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  /* Everything that reads files or allocates happens here, before the command's process exists:
   * it is made with vfork (no copy of this process's page tables, which costs a large part of an
   * exec in a paravirtualized guest), so until it execs it may only make system calls and write
   * to its own stack. This handler has no thread and no signal handler it could run. */
  struct ids ids;
  char msg[1024];
  int unresolved = 0;
  const char *home = NULL, *name = NULL;
  if (user[0]) {
    unresolved = resolve_user(user, &ids, msg, sizeof msg) != 0;
    if (!unresolved && (flags & FLAG_EXEC_HOME)) home = ids.have_entry && ids.home[0] ? ids.home : "/";
    if (!unresolved && ids.have_entry) name = ids.name;
    /* The terminal is the command's: its user owns it, as a login's would. */
    if (!unresolved && tty) {
      if (fchown(slave, ids.uid, ids.gid)) {}
    }
  }
  /* execvp searches the command's own PATH, so the environment is the command's from here on. */
  environ = merge_env(extra, envc, home, name, flags & FLAG_EXEC_CLEAN_ENV);
  pid_t pid = vfork();
  cmd_pid = pid;
  if (pid == 0) {
    setsid(); /* its own process group: a kill reaches every descendant */
    if (tty) ioctl(slave, TIOCSCTTY, 0);
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    close_from(3);
    char line[1400];
    if (unresolved) {
      write_full(2, msg, strlen(msg));
      _exit(126);
    }
    if (user[0] && drop_to(&ids)) {
      snprintf(line, sizeof line, "denv-agent: cannot become user %s: %s\n", user, strerror(errno));
      write_full(2, line, strlen(line));
      _exit(126);
    }
    if (cwd[0] && chdir(cwd)) {
      snprintf(line, sizeof line, "denv-agent: chdir %s: %s\n", cwd, strerror(errno));
      write_full(2, line, strlen(line));
      _exit(126);
    }
    execvp(argv[0], argv);
    int e = errno;
    snprintf(line, sizeof line, "denv-agent: %s: %s\n", argv[0], strerror(e));
    write_full(2, line, strlen(line));
    _exit(e == ENOENT ? 127 : 126);
  }
  if (pid < 0) _exit(1);
  if (tty) close(slave);
  else {
    close(in[0]);
    close(out[1]);
    close(err[1]);
  }
  int stdin_fd = in[1];
  /* stdin is written without blocking: a command that stops reading its stdin while it writes
   * output must not stall the relay (its output would fill, and it would wait forever). While a
   * frame of stdin is pending no further frame is read, so denvd (and the client) wait instead. */
  fcntl(stdin_fd, F_SETFL, fcntl(stdin_fd, F_GETFL) | O_NONBLOCK);
  /* Larger pipes: output is relayed in frames of up to 256 KiB instead of 64 KiB (best effort). */
  if (!tty) {
    fcntl(stdin_fd, F_SETPIPE_SZ, 256 * 1024);
    fcntl(out[0], F_SETPIPE_SZ, 256 * 1024);
    fcntl(err[0], F_SETPIPE_SZ, 256 * 1024);
  }
  char *pend = NULL;
  uint32_t pend_len = 0, pend_off = 0;
  struct pollfd fds[4] = {{conn, POLLIN, 0}, {out[0], POLLIN, 0}, {err[0], POLLIN, 0}, {-1, POLLOUT, 0}};
  int open_out = 1, open_err = !tty, killed = 0;
  static char buf[256 * 1024];
  signal(SIGPIPE, SIG_IGN);
  while (open_out || open_err) {
    fds[1].fd = open_out ? out[0] : -1;
    fds[2].fd = open_err ? err[0] : -1;
    fds[3].fd = pend ? stdin_fd : -1;
    /* With stdin pending the connection is watched only for a hang-up (always reported). */
    fds[0].events = pend ? 0 : POLLIN;
    if (poll(fds, 4, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].fd >= 0 && pend && (fds[0].revents & (POLLHUP | POLLERR))) {
      kill(-pid, SIGKILL);
      kill_tree();
      killed = 1;
      fds[0].fd = -1;
    } else if (fds[0].fd >= 0 && !pend && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      char head[5];
      if (read_full(conn, head, 5)) {
        /* the client is gone: nothing may outlive it */
        kill(-pid, SIGKILL);
        kill_tree();
        killed = 1;
        fds[0].fd = -1;
      } else {
        uint32_t len;
        memcpy(&len, head + 1, 4);
        if (len > (16u << 20)) _exit(1);
        char *data = len ? malloc(len) : NULL;
        if (len && (!data || read_full(conn, data, len))) _exit(1);
        if (head[0] == FRAME_IN_DATA && stdin_fd >= 0 && len) {
          pend = data, pend_len = len, pend_off = 0;
          data = NULL;
        } else if (head[0] == FRAME_IN_END && stdin_fd >= 0) {
          /* A terminal's input ends as a person's does: its end-of-file character (^D), which a
           * program reading lines takes as the end; the terminal itself stays the command's. */
          if (tty) {
            if (write(stdin_fd, "\x04", 1)) {}
          } else close(stdin_fd);
          stdin_fd = -1;
        } else if (head[0] == FRAME_IN_RESIZE && tty) {
          struct winsize_record size;
          if (!get_winsize_record(data ? data : "", len, &size)) {
            struct winsize ws = {.ws_row = (unsigned short)size.rows, .ws_col = (unsigned short)size.cols};
            ioctl(master, TIOCSWINSZ, &ws); /* the kernel tells the foreground group (SIGWINCH) */
          }
        } else if (head[0] == FRAME_IN_KILL) {
          kill(-pid, SIGKILL);
          kill_tree();
          killed = 1;
        }
        free(data);
      }
    }
    if (pend) {
      ssize_t w = write(stdin_fd, pend + pend_off, pend_len - pend_off);
      if (w > 0) pend_off += (uint32_t)w;
      if ((w < 0 && errno != EAGAIN && errno != EINTR) || pend_off == pend_len) {
        /* written, or the command closed its stdin: what it did not take is dropped */
        if (w < 0) { if (!tty) close(stdin_fd); stdin_fd = -1; }
        free(pend);
        pend = NULL;
      }
    }
    for (int i = 1; i <= 2; i++) {
      if (fds[i].fd >= 0 && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
        ssize_t r = read(fds[i].fd, buf, sizeof buf);
        /* A terminal's side is non-blocking (it is stdin's too): nothing yet is not its end, and
         * EIO is (every holder of the command's side has closed it). */
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        if (r <= 0) {
          if (i == 1) open_out = 0; else open_err = 0;
        } else if (!killed || fds[0].fd >= 0) {
          if (send_frame(conn, i == 1 ? FRAME_OUT_STDOUT : FRAME_OUT_STDERR, buf, (uint32_t)r)) { kill(-pid, SIGKILL); killed = 1; fds[0].fd = -1; }
        }
      }
    }
  }
  free(pend);
  if (stdin_fd >= 0) close(stdin_fd);
  int status = cmd_status;
  if (!cmd_reaped)
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  /* Background children of the command are part of its tree: they go with it. */
  kill(-pid, SIGKILL);
  int32_t code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  send_status(conn, code);
  end_request(conn);
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

/* Dials denvd and serves its requests: forever (reconnecting after a denvd restart), or, when
 * once is set (host mode), until the first dial fails or the control connection ends. */
static void agent_loop(const char *sock, int once) {
  signal(SIGCHLD, SIG_IGN); /* request handlers are reaped by the kernel */
  /* A subreaper too: what a finished handler leaves (its command's killed or surviving
   * background processes) is reparented here rather than to the container's PID 1, the service's
   * command, which may never reap (sleep infinity). With SIGCHLD ignored the kernel releases them
   * as they die: no zombie keeps holding one of the container's pids. */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  signal(SIGPIPE, SIG_IGN);
  unsigned backoff_ms = 20;
  for (;;) {
    int ctl = dial(sock);
    if (ctl < 0 && once) _exit(0);
    if (ctl < 0) {
      /* denvd is not listening (yet, or it is restarting, or it let go while the container's
       * processes were checkpointed): try again, a little later each time, at most 160 ms apart.
       * A failed dial of a unix socket costs microseconds; a restored fork waits on this one. */
      struct timespec ts = {backoff_ms / 1000, (long)(backoff_ms % 1000) * 1000000L};
      nanosleep(&ts, NULL);
      if (backoff_ms < 100) backoff_ms *= 2;
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
    if (once) _exit(0);
  }
}

/*
 * host mode: `denv-agent host SOCKET PARENT_PID`. denvd runs its own host commands (btrfs, du,
 * nsenter, ip) through one of these instead of starting each itself: a Node process's fork copies
 * its page tables (milliseconds at a few hundred MiB, on the event loop's thread), this one's costs
 * a fraction of one. Root, the host's files and environment: it runs what denvd asks, as denvd
 * would. It lives exactly as long as denvd: killed with it (PDEATHSIG), and gone when its socket
 * is (no retrying a denvd that went away, unlike a container's agent).
 */
int host_mode;

static int run_host(const char *sock, const char *parent) {
  host_mode = 1;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  /* The parent may have died before the line above: then nothing would ever kill this one. */
  if (getppid() != (pid_t)strtol(parent, NULL, 10)) return 1;
  agent_loop(sock, 1);
  return 0;
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
    close_from(3); /* /dev/null stays as 0 and 1 */
    agent_loop(sock, 0);
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
  if (argc == 4 && strcmp(argv[1], "host") == 0) return run_host(argv[2], argv[3]);
  if (argc == 4 && strcmp(argv[1], "relay") == 0) return run_relay(argv[2], argv[3]);
  if (argc != 2) {
    fprintf(stderr, "usage: denv-agent SOCKET | denv-agent init SOCKET USER FLAGS -- PROGRAM [ARGS...] | "
                    "denv-agent host SOCKET PARENT_PID | denv-agent relay PORT SOCKET\n");
    return 2;
  }
  agent_loop(argv[1], 0);
  return 0;
}
