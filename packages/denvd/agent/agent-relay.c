/*
 * relay mode (`denv-agent relay PORT SOCKET`): an environment's egress gateway. It listens on
 * PORT on every address of the container's networks (the stack's own, which have no route out)
 * and hands each connection to denvd's egress proxy on the host through SOCKET, a unix socket
 * denvd made in a directory mounted read-only (the container dials; denvd never connects to
 * anything the container made). Each connection starts with a relay_hello record (RELAY_MAGIC,
 * the caller's address and port: the proxy's log names the service), then the caller's bytes
 * both ways. Nothing is decided here: the policy, the names and the way out are denvd's.
 *
 * One child per connection; the container's pids cap bounds how many (a fork refused closes the
 * connection), and a child whose denvd side is gone closes its caller at once.
 */
#include "denv-agent.h"

static void hand_over(int conn, const struct sockaddr_in *from, const char *path) {
  int u = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (u < 0 || strlen(path) >= sizeof addr.sun_path) _exit(1);
  memcpy(addr.sun_path, path, strlen(path) + 1);
  if (connect(u, (struct sockaddr *)&addr, sizeof addr)) _exit(1);
  struct relay_hello_record hello = {
      .magic = RELAY_MAGIC, .addr = ntohl(from->sin_addr.s_addr), .port = ntohs(from->sin_port)};
  char buf[64];
  int n = put_relay_hello_record(buf, sizeof buf, &hello);
  if (n < 0 || write_full(u, buf, (size_t)n)) _exit(1);
  relay(conn, u);
  _exit(0);
}

int run_relay(const char *port_text, const char *path) {
  char *end;
  long port = strtol(port_text, &end, 10);
  if (*end || port < 1 || port > 65535) {
    fprintf(stderr, "denv-agent relay: bad port %s\n", port_text);
    return 2;
  }
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  if (s < 0 || setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
      bind(s, (struct sockaddr *)&addr, sizeof addr) || listen(s, 1024)) {
    fprintf(stderr, "denv-agent relay: listening on %ld: %s\n", port, strerror(errno));
    return 1;
  }
  /* Children are never waited for: the kernel reaps them. */
  signal(SIGCHLD, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  for (;;) {
    struct sockaddr_in from;
    socklen_t len = sizeof from;
    int conn = accept4(s, (struct sockaddr *)&from, &len, SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) continue;
      fprintf(stderr, "denv-agent relay: accept: %s\n", strerror(errno));
      return 1;
    }
    pid_t pid = fork();
    if (pid == 0) {
      close(s);
      hand_over(conn, &from, path);
    }
    close(conn);
  }
}
