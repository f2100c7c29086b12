#!/bin/sh
# Boots the stand-in machine: its Docker engine, then (like cloud-init) the user data it was given
# in /var/lib/cloud/user-data, if any, with output in /var/log/cloud-init-output.log.
# REGISTRY_FORWARD=host:port makes 127.0.0.1:5000 here reach that registry (the pinned image
# references of the tests' stacks name 127.0.0.1:5000).
set -u
if [ -n "${REGISTRY_FORWARD:-}" ]; then
  socat TCP-LISTEN:5000,bind=127.0.0.1,fork,reuseaddr "TCP:$REGISTRY_FORWARD" &
fi
if [ "${START_DOCKER:-1}" = 1 ]; then
  dockerd >/var/log/dockerd.log 2>&1 &
  i=0
  while ! docker info >/dev/null 2>&1; do
    i=$((i + 1))
    if [ $i -gt 300 ]; then echo "dockerd did not start" >&2; tail -20 /var/log/dockerd.log >&2; exit 1; fi
    sleep 0.2
  done
fi
touch /var/run/booted
if [ -s /var/lib/cloud/user-data ]; then
  sh /var/lib/cloud/user-data >/var/log/cloud-init-output.log 2>&1 &
fi
exec sleep infinity
