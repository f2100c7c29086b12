#!/usr/bin/env bash
# Removes what an earlier, killed test run may have left on this machine: containers, networks and
# volumes labelled by denv's tests (the provider doubles' sandboxes and snapshots among them), and test mounts under denv's test state directory. Objects of a
# running denv that are not test-labelled are left alone. Safe on a bare machine.
set -uo pipefail
DOCKER=/usr/bin/docker
if timeout 5 "$DOCKER" info >/dev/null 2>&1; then
  ids=$("$DOCKER" ps -aq --filter label=dev.denv.test)
  [ -n "$ids" ] && "$DOCKER" rm -f -v $ids >/dev/null 2>&1
  nets=$("$DOCKER" network ls -q --filter label=dev.denv.test)
  [ -n "$nets" ] && "$DOCKER" network rm $nets >/dev/null 2>&1
  vols=$("$DOCKER" volume ls -q --filter label=dev.denv.test)
  [ -n "$vols" ] && "$DOCKER" volume rm -f $vols >/dev/null 2>&1
  # The hosted providers' doubles run sandboxes as containers under their own labels, and keep
  # snapshots as images.
  for double in e2b daytona modal prime; do
    ids=$("$DOCKER" ps -aq --filter "label=dev.denv.$double-double")
    [ -n "$ids" ] && "$DOCKER" rm -f -v $ids >/dev/null 2>&1
  done
  imgs=$("$DOCKER" images -q denv-e2b-double-snapshot; "$DOCKER" images -q denv-modal-double-snapshot)
  [ -n "$imgs" ] && "$DOCKER" rmi -f $imgs >/dev/null 2>&1
fi
# Test btrfs pools are loop-mounted under /var/lib/denv-test; unmount them (deepest first) and free
# their loop devices.
if [ -d /var/lib/denv-test ]; then
  # PostgreSQL clusters the store tests started.
  pkill -9 -f 'postgres.*-D /var/lib/denv-test/pg-' 2>/dev/null
  awk '$2 ~ "^/var/lib/denv-test/" {print $2}' /proc/mounts | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null
  done
  losetup -l -n -O NAME,BACK-FILE 2>/dev/null | awk '$2 ~ "^/var/lib/denv-test/" {print $1}' |
    while read -r dev; do losetup -d "$dev" 2>/dev/null; done
  rm -rf /var/lib/denv-test
fi
# Host agents' socket directories (denvd/src/host/host-command.ts) whose process was killed.
for d in /tmp/denvd-host-*-*; do
  [ -d "$d" ] || continue
  pid=${d#/tmp/denvd-host-}
  pid=${pid%%-*}
  [ -d "/proc/$pid" ] || rm -rf "$d"
done
# The ingress test's network namespaces, veth pairs and resolvers (test/e2e/ingress.test.ts).
for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^denv-ing-/ {print $1}'); do
  pkill -9 -f "dnsmasq.*denv.test" 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  rm -rf "/etc/netns/$ns"
done
for link in $(ip -o link show 2>/dev/null | awk -F': ' '$2 ~ /^dving[0-9]+@/ {sub(/@.*/, "", $2); print $2}'); do
  ip link del "$link" 2>/dev/null
done
# The egress tests' own internets (test/harness/test-internet.ts): the namespace takes its veth
# pair with it; its upstream servers run inside it.
for ns in $(ip netns list 2>/dev/null | awk '$1 ~ /^denv-inet-/ {print $1}'); do
  for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  ip netns del "$ns" 2>/dev/null
done
exit 0
