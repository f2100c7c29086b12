#!/usr/bin/env bash
# Host set-up for denv on Debian, as root. Idempotent: every step first checks whether it is
# already done, so a second run on a ready machine changes nothing and takes a few seconds.
#
#   1. Debian packages: docker.io, btrfs-progs, debootstrap, docker-registry, docker-compose
#   2. dockerd running (no systemd here: started in the background, socket awaited)
#   3. the base image debian:bookworm, built with debootstrap + `docker import` when missing
#   4. a local registry on 127.0.0.1:5000, so images get real registry digests
#   5. denv-agent, the static exec agent denvd mounts into sandboxes (gcc -static), and
#      libdenv-clock.so, the frozen clock it preloads
#   6. the example images built FROM debian:bookworm and pushed to that registry
#   (and CRIU, for live versions: scripts/ensure-criu.sh, dockerd started with checkpoints)
#
# `setup-host.sh main` sets up only what the main job uses (the engine, the registry, the agent and
# clock, ops-world's images); with no argument, also what the tests use (PostgreSQL, Python's pip,
# docker-compose, jq, every example's and test's images).
#
# It never pulls from the internet: the only network it uses is Debian's mirror (apt, debootstrap,
# and apt-get inside image builds).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${DENV_HOST_STATE:-/var/lib/denv-host}
REGISTRY_ADDR=${DENV_REGISTRY:-127.0.0.1:5000}
DEBIAN_MIRROR=${DENV_DEBIAN_MIRROR:-http://deb.debian.org/debian}
DOCKER=/usr/bin/docker # Debian's client, matching Debian's engine (the image may ship another)

log() { printf '[setup] %s\n' "$*" >&2; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (it installs packages and starts dockerd)"
# Two set-ups at once would push the same image twice (the registry refuses the second: 500).
DENV_LOCK=setup source "$ROOT/scripts/run-lock.sh"
mkdir -p "$STATE"

# --- 1. packages -------------------------------------------------------------------------------
FOR=${1:-all}
case "$FOR" in main | all) ;; *) echo "usage: setup-host.sh [main|all]" >&2; exit 2 ;; esac
need=()
[ -x /usr/sbin/dockerd ] || need+=(docker.io)
[ -x /usr/bin/docker ] || need+=(docker.io)
command -v btrfs >/dev/null || need+=(btrfs-progs)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v docker-registry >/dev/null || need+=(docker-registry)
[ "$FOR" = main ] || command -v docker-compose >/dev/null || need+=(docker-compose)
command -v ip >/dev/null || need+=(iproute2)
command -v curl >/dev/null || need+=(curl)
command -v git >/dev/null || need+=(git)
command -v openssl >/dev/null || need+=(openssl)
if [ "$FOR" = all ]; then
  command -v jq >/dev/null || need+=(jq)
  # rsync: the episode diff's benchmark peer (rsync -rcn of the same trees).
  command -v rsync >/dev/null || need+=(rsync)
  # dnsmasq: the ingress tests' resolver, answering *.denv.test inside a network namespace of their own.
  command -v dnsmasq >/dev/null || [ -x /usr/sbin/dnsmasq ] || need+=(dnsmasq-base)
  # PostgreSQL: the store's second database, which its tests start a throw-away cluster of.
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
  # Python 3.11+: the denv Python package and its adapters' conformance suites (standard library only).
  [ -x /usr/bin/python3 ] || need+=(python3)
  /usr/bin/python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip python3-setuptools python3-wheel)
fi
# gcc and libc6-dev: denv-agent, the exec agent denvd puts into sandboxes, is a static C program.
command -v gcc >/dev/null || need+=(gcc)
[ -f /usr/lib/x86_64-linux-gnu/libc.a ] || [ -f /usr/lib/aarch64-linux-gnu/libc.a ] || need+=(libc6-dev)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# --- 2. dockerd ----------------------------------------------------------------------------------
docker_up() { timeout 5 "$DOCKER" info >/dev/null 2>&1; }
# CRIU (live versions): dockerd runs with checkpoints (its experimental mode) and the bundle's
# `criu` first on its PATH, which containerd and runc inherit. Without it, dockerd runs as before
# and a live snapshot is refused, saying so.
criu_bin=$(bash "$ROOT/scripts/ensure-criu.sh") || criu_bin=
if [ -n "$criu_bin" ] && docker_up && [ "$(timeout 5 "$DOCKER" info --format '{{.ExperimentalBuild}}')" != true ]; then
  log "restarting dockerd with checkpoints"
  pid=$(cat /var/run/docker.pid 2>/dev/null || true)
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 60); do [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
fi
if ! docker_up; then
  log "starting dockerd"
  # A dockerd killed with the last session may have left its pid file behind; dockerd refuses to
  # start while it names a live process, and any other stale file is harmless.
  if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
    rm -f /var/run/docker.pid
  fi
  if [ -n "$criu_bin" ]; then
    PATH="$criu_bin:$PATH" setsid nohup /usr/sbin/dockerd --experimental >>/var/log/denv-dockerd.log 2>&1 </dev/null &
  else
    setsid nohup /usr/sbin/dockerd >>/var/log/denv-dockerd.log 2>&1 </dev/null &
  fi
  for _ in $(seq 1 120); do docker_up && break; sleep 0.5; done
  docker_up || { tail -20 /var/log/denv-dockerd.log >&2; die "dockerd did not answer within 60 s"; }
fi

# --- 3. base image ------------------------------------------------------------------------------
if ! "$DOCKER" image inspect debian:bookworm >/dev/null 2>&1; then
  rootfs="$STATE/rootfs-bookworm"
  if [ ! -f "$rootfs.done" ]; then
    log "debootstrap bookworm (about a minute)"
    rm -rf "$rootfs"
    debootstrap --variant=minbase bookworm "$rootfs" "$DEBIAN_MIRROR" >"$STATE/debootstrap.log" 2>&1 ||
      { tail -20 "$STATE/debootstrap.log" >&2; die "debootstrap failed"; }
    # Keep the image small and apt usable inside builds.
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    touch "$rootfs.done"
  fi
  log "importing debian:bookworm"
  tar -C "$rootfs" -c . | "$DOCKER" import -c 'CMD ["bash"]' - debian:bookworm >/dev/null
fi

# --- 4. registry --------------------------------------------------------------------------------
registry_up() { curl -fsS -o /dev/null --max-time 2 2>/dev/null "http://$REGISTRY_ADDR/v2/"; }
if ! registry_up; then
  log "starting docker-registry on $REGISTRY_ADDR"
  mkdir -p "$STATE/registry"
  cat >"$STATE/registry.yml" <<YAML
version: 0.1
log: { level: warn }
storage:
  filesystem: { rootdirectory: $STATE/registry }
  delete: { enabled: true }
http: { addr: $REGISTRY_ADDR }
YAML
  setsid nohup docker-registry serve "$STATE/registry.yml" >>/var/log/denv-registry.log 2>&1 </dev/null &
  for _ in $(seq 1 40); do registry_up && break; sleep 0.25; done
  registry_up || { tail -20 /var/log/denv-registry.log >&2; die "registry did not answer on $REGISTRY_ADDR"; }
fi

# --- 5. denv-agent ---------------------------------------------------------------------------
# Built static, so it runs in any image; rebuilt only when its source changes.
AGENT_SRC="$ROOT/packages/denvd/agent"
AGENT_DIR="$STATE/agent"
agent_hash=$(cat "$AGENT_SRC"/*.c "$AGENT_SRC"/*.h | sha256sum | cut -c1-16)
if [ "$(cat "$AGENT_DIR/.hash" 2>/dev/null)" != "$agent_hash" ]; then
  log "building denv-agent"
  mkdir -p "$AGENT_DIR"
  gcc -O2 -static -o "$AGENT_DIR/denv-agent.tmp" "$AGENT_SRC"/*.c
  mv "$AGENT_DIR/denv-agent.tmp" "$AGENT_DIR/denv-agent"
  echo "$agent_hash" >"$AGENT_DIR/.hash"
fi
# libdenv-clock.so, the frozen clock denvd preloads into stacks with x-denv.clock: frozen. It uses
# no C library (raw system calls), so it loads into any glibc and into musl.
CLOCK_SRC="$ROOT/packages/denvd/clock/denv-clock.c"
clock_hash=$(sha256sum <"$CLOCK_SRC" | cut -c1-16)
if [ "$(cat "$AGENT_DIR/.clock-hash" 2>/dev/null)" != "$clock_hash" ]; then
  log "building libdenv-clock.so"
  mkdir -p "$AGENT_DIR"
  gcc -O2 -Wall -shared -fPIC -nostdlib -fno-stack-protector -fno-builtin -fvisibility=hidden \
    -Wl,--hash-style=both -Wl,-z,noexecstack -o "$AGENT_DIR/libdenv-clock.so.tmp" "$CLOCK_SRC"
  mv "$AGENT_DIR/libdenv-clock.so.tmp" "$AGENT_DIR/libdenv-clock.so"
  echo "$clock_hash" >"$AGENT_DIR/.clock-hash"
fi

# --- 6. example images --------------------------------------------------------------------------
# Each images/<name>/ directory holds a Dockerfile and a file IMAGE naming its reference. The image
# is rebuilt only when its build context changed (hash kept in a label), and pushed only when the
# registry does not hold that reference yet.
build_and_push() {
  local dir=$1 ref repo tag hash have
  ref=$(tr -d ' \n' <"$dir/IMAGE")
  repo=${ref#"$REGISTRY_ADDR"/}; repo=${repo%:*}; tag=${ref##*:}
  hash=$(cd "$dir" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
  have=$("$DOCKER" image inspect -f '{{ index .Config.Labels "dev.denv.context-hash" }}' "$ref" 2>/dev/null || true)
  if [ "$have" != "$hash" ]; then
    log "building $ref"
    DOCKER_BUILDKIT=0 "$DOCKER" build -q --label "dev.denv.context-hash=$hash" -t "$ref" "$dir" >"$STATE/build.log" 2>&1 ||
      { tail -30 "$STATE/build.log" >&2; die "building $ref failed"; }
  fi
  local local_id pushed_hash
  pushed_hash=$(curl -fsS --max-time 5 -H 'Accept: application/vnd.docker.distribution.manifest.v2+json' \
    "http://$REGISTRY_ADDR/v2/$repo/manifests/$tag" 2>/dev/null | jq -r '.config.digest // empty' || true)
  local_id=$("$DOCKER" image inspect -f '{{.Id}}' "$ref")
  if [ "$pushed_hash" != "$local_id" ]; then
    log "pushing $ref"
    "$DOCKER" push -q "$ref" >/dev/null
  fi
}
# The main job deploys ops-world only; the tests use every example's images and their own.
if [ "$FOR" = main ]; then
  dirs=("$ROOT"/examples/ops-world/images/*/)
else
  dirs=("$ROOT"/examples/*/images/*/ "$ROOT"/test/images/*/)
fi
for dir in "${dirs[@]}"; do
  [ -f "$dir/IMAGE" ] && build_and_push "${dir%/}"
done
log "host ready"
