/* port requests: a relay to 127.0.0.1:port inside the container's network namespace. */
#include "denv-agent.h"

/* Relays bytes between a and b; each direction's end is passed on as a half-close. */
void relay(int a, int b) {
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

void serve_port(int conn) {
  struct port_request req;
  if (read_port_request(conn, &req) || req.port == 0 || req.port > 65535) _exit(1);
  uint32_t port = req.port;
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  uint8_t status = 0;
  if (s < 0 || connect(s, (struct sockaddr *)&addr, sizeof addr)) status = (uint8_t)(errno ? errno : 1);
  if (write_full(conn, &status, 1) || status) _exit(0);
  relay(conn, s);
  _exit(0);
}
