#!/bin/sh
set -e
if [ "$1" = redis-server ] && [ "$(id -u)" = 0 ]; then
  chown redis:redis /data
  shift
  exec setpriv --reuid=redis --regid=redis --init-groups redis-server --protected-mode no --dir /data "$@"
fi
exec "$@"
