#!/usr/bin/env bash
# CRIU for live versions: Debian's criu 4.2 (testing, "forky") as a self-contained bundle (its own
# loader and libraries), because Debian 12's 3.17 fails `criu check` on this kernel (vdso bounds),
# Debian 13's 4.1 cannot dump any TCP socket on kernels from 6.16 (it reads SO_PASSCRED and
# SO_PASSSEC of every socket, which those kernels refuse on INET sockets: criu#2705, fixed in
# 4.2), and both need a newer glibc than Debian 12's. Everything comes from Debian's mirror, into a separate apt state:
# the system's own package lists are never touched. Prints the directory to put first on PATH
# (holding a `criu` that runc, under dockerd, finds there).
#
# Idempotent: a bundle that already answers `criu check` is kept. Exits non-zero, saying why,
# where CRIU cannot run here (the caller then starts dockerd without checkpoints).
set -euo pipefail

STATE=${DENV_HOST_STATE:-/var/lib/denv-host}
MIRROR=${DENV_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=${DENV_CRIU_SUITE:-forky}
DIR=$STATE/criu
BIN=$DIR/bin
log() { printf '[criu] %s\n' "$*" >&2; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
arch=$(dpkg --print-architecture)
case "$arch" in amd64) triple=x86_64-linux-gnu loader=ld-linux-x86-64.so.2 ;;
  arm64) triple=aarch64-linux-gnu loader=ld-linux-aarch64.so.1 ;;
  *) log "no CRIU bundle for $arch"; exit 1 ;; esac

# A bundle is kept when it answers `criu check` and is 4.2 or later (an older one left by an
# earlier setup is replaced).
recent() { "$BIN/criu" --version 2>/dev/null | grep -qE '^Version: (4\.([2-9]|[1-9][0-9])|([5-9]|[1-9][0-9])\.)'; }
check() { "$BIN/criu" check >/dev/null 2>&1; }
# denv's configuration, written on every run (a kept bundle gets the current one):
# - denv.conf (CRIU_CONFIG_FILE, set by the wrapper below): file locks kept, and the action script
#   that gives a restored process its parent container's addresses before its sockets are made;
# - /etc/criu/runc.conf, which runc hands CRIU as the configuration that overrides runc's own
#   options (runc always says "no" to established connections itself): established TCP
#   connections are dumped in repair mode and restored, so a connection one service holds to
#   another goes on in a fork (against the fork's copy: the parent's addresses exist only on the
#   fork's own bridge) and across a pause. A runc.conf denv did not write is left alone.
configure() {
  mkdir -p "$DIR/bin"
  # runc runs `criu swrk 3` from PATH; the wrapper runs the real one with the bundle's loader and
  # libraries, and points it at denv's configuration (which runc's RPC mode reads from this
  # variable). It preloads denv-criu-limits.so where that was built: CRIU then reads another
  # user's process limits from /proc where root lacks CAP_SYS_RESOURCE (the library says why).
  limits="$DIR/lib/denv-criu-limits.so"
  src="$ROOT/packages/denvd/criu/denv-criu-limits.c"
  if command -v gcc >/dev/null && [ -f "$src" ]; then
    gcc -O2 -Wall -shared -fPIC -o "$limits.tmp" "$src" -ldl && mv "$limits.tmp" "$limits"
  else
    log "no gcc: CRIU cannot take another user's processes where root lacks CAP_SYS_RESOURCE"
    rm -f "$limits"
  fi
  # Written beside and moved into place: a runc starting CRIU meanwhile reads one whole wrapper.
  cat >"$DIR/bin/criu.tmp" <<SH
#!/bin/sh
export CRIU_CONFIG_FILE="\${CRIU_CONFIG_FILE:-$DIR/denv.conf}"
if [ -f "$limits" ]; then
  exec "$DIR/lib/$loader" --library-path "$DIR/lib" --preload "$limits" "$DIR/bin/criu.real" "\$@"
fi
exec "$DIR/lib/$loader" --library-path "$DIR/lib" "$DIR/bin/criu.real" "\$@"
SH
  chmod 755 "$DIR/bin/criu.tmp" && mv "$DIR/bin/criu.tmp" "$DIR/bin/criu"
  cat >"$DIR/bin/denv-restore-net" <<'HOOK'
#!/bin/sh
# CRIU's action script for a restore. Each address the dumped container had, listed by denvd in
# the images' denv-addrs ("eth0 10.0.3.4 10.0.3.0/24"), is given back to the new container at
# setup-namespaces (its network namespace exists, no socket is made yet): the address as a /32
# beside the container's own and an on-link route to its old subnet, on the same interface, so
# each restored connection binds and connects again on its old addresses. Until network-unlock
# (every socket is back, no process runs yet) the namespace drops every TCP packet that comes in
# and the interface answers no ARP: a peer's packet that came meanwhile (a peer that kept the
# address's MAC from before a pause, say) would find the address without its socket and reset the
# connection; dropped, it is sent again. A dump runs network-unlock too: with no such rule and an
# interface that answers ARP, nothing is done. Lines not of that shape are skipped.
list="${CRTOOLS_IMAGE_DIR:-}/denv-addrs"
[ -s "$list" ] || exit 0
pid=${CRTOOLS_INIT_PID:-}
[ -n "$pid" ] || exit 0
ns() { nsenter -t "$pid" -n "$@" </dev/null; }
each() {
  ip4='[0-9]{1,3}(\.[0-9]{1,3}){3}'
  while read -r dev addr net; do
    printf '%s\n' "$dev" | grep -qE '^[a-z][a-z0-9]{0,14}$' || continue
    printf '%s\n' "$addr" | grep -qE "^$ip4\$" || continue
    printf '%s\n' "$net" | grep -qE "^$ip4/[0-9]{1,2}\$" || continue
    "$@" || exit 1
  done <"$list"
}
arp() { ns sh -c "echo $1 >/proc/sys/net/ipv4/conf/$dev/arp_ignore"; }
give() {
  arp 8 &&
    { ns ip -o -4 addr show dev "$dev" | grep -q " $addr/" || ns ip addr add "$addr/32" dev "$dev"; } &&
    { ns ip route show exact "$net" | grep -q . || ns ip route add "$net" dev "$dev" scope link; }
}
answer() { [ "$(ns cat "/proc/sys/net/ipv4/conf/$dev/arp_ignore")" != 8 ] || arp 0; }
hold() { ns iptables -w "$1" INPUT -p tcp -m comment --comment denv-restore -j DROP; }
case "${CRTOOLS_SCRIPT_ACTION:-}" in
setup-namespaces)
  # Without iptables here the hold is left out (ARP is still withheld); the restore goes on.
  hold -I 2>/dev/null || :
  each give
  ;;
network-unlock)
  if hold -C 2>/dev/null; then hold -D || exit 1; fi
  each answer
  ;;
esac
exit 0
HOOK
  chmod 755 "$DIR/bin/denv-restore-net"
  cat >"$DIR/denv.conf" <<CONF
file-locks
action-script $DIR/bin/denv-restore-net
CONF
  mkdir -p /etc/criu
  if [ ! -e /etc/criu/runc.conf ] || grep -q '^# denv' /etc/criu/runc.conf; then
    printf '# denv: scripts/ensure-criu.sh\ntcp-established\n' >/etc/criu/runc.conf
  else
    log "/etc/criu/runc.conf is not denv's: established connections follow what it says"
  fi
}

if [ -x "$BIN/criu.real" ] && configure && recent && check; then
  echo "$BIN"
  exit 0
fi

log "fetching criu and its libraries from Debian's $SUITE"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/lists/partial" "$T/arch/partial" "$T/debs" "$T/root"
echo "deb $MIRROR $SUITE main" >"$T/sources.list"
A=(-o "Dir::State::Lists=$T/lists" -o "Dir::Etc::sourcelist=$T/sources.list" -o "Dir::Etc::sourceparts=-"
  -o "Dir::Cache::archives=$T/arch" -o "Dir::State::status=/dev/null" -o "APT::Architecture=$arch"
  -o "APT::Sandbox::User=root")
apt-get "${A[@]}" update -qq >/dev/null
# The package's whole dependency closure in that suite (what criu and its libraries link against).
pkgs=$(apt-cache "${A[@]}" depends --recurse --no-recommends --no-suggests --no-conflicts \
  --no-breaks --no-replaces --no-enhances --no-pre-depends criu |
  grep -E '^[a-z0-9]' | grep -vE '^(debconf|dpkg|perl|python3|init-system-helpers|usrmerge|libc-bin|tzdata)' |
  sort -u | grep -vE ':(i386|any)$' || true)
# Only the libraries and criu itself: no maintainer scripts run, nothing is installed.
want=$(printf '%s\n' $pkgs | grep -E '^(criu|lib)')
(cd "$T/debs" && apt-get "${A[@]}" download $want >/dev/null 2>&1) || {
  log "could not download the bundle's packages"
  exit 1
}
for d in "$T"/debs/*.deb; do dpkg-deb -x "$d" "$T/root"; done
rm -rf "$DIR.new" && mkdir -p "$DIR.new/bin" "$DIR.new/lib"
cp -a "$T/root/usr/lib/$triple/." "$DIR.new/lib/" 2>/dev/null || true
cp -a "$T/root/lib/$triple/." "$DIR.new/lib/" 2>/dev/null || true
cp "$T/root/usr/sbin/criu" "$DIR.new/bin/criu.real"
rm -rf "$DIR" && mv "$DIR.new" "$DIR"
configure
if ! recent; then
  log "$SUITE's criu is $("$BIN/criu" --version | head -1): 4.2 or later is needed"
  exit 1
fi
if ! check; then
  log "criu check failed: $("$BIN/criu" check 2>&1 | tail -2 | tr '\n' ' ')"
  exit 1
fi
log "criu $("$BIN/criu" --version | head -1) ready in $BIN"
echo "$BIN"
