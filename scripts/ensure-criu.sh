#!/usr/bin/env bash
# CRIU for live versions: Debian 13's criu 4.1 as a self-contained bundle (its own loader and
# libraries), because Debian 12's 3.17 fails `criu check` on this kernel (vdso bounds) and 4.1 needs
# a newer glibc than Debian 12's. Everything comes from Debian's mirror, into a separate apt state:
# the system's own package lists are never touched. Prints the directory to put first on PATH
# (holding a `criu` that runc, under dockerd, finds there).
#
# Idempotent: a bundle that already answers `criu check` is kept. Exits non-zero, saying why,
# where CRIU cannot run here (the caller then starts dockerd without checkpoints).
set -euo pipefail

STATE=${DENV_HOST_STATE:-/var/lib/denv-host}
MIRROR=${DENV_DEBIAN_MIRROR:-http://deb.debian.org/debian}
DIR=$STATE/criu
BIN=$DIR/bin
log() { printf '[criu] %s\n' "$*" >&2; }

check() { "$BIN/criu" check >/dev/null 2>&1; }
if [ -x "$BIN/criu" ] && check; then
  echo "$BIN"
  exit 0
fi

arch=$(dpkg --print-architecture)
case "$arch" in amd64) triple=x86_64-linux-gnu loader=ld-linux-x86-64.so.2 ;;
  arm64) triple=aarch64-linux-gnu loader=ld-linux-aarch64.so.1 ;;
  *) log "no CRIU bundle for $arch"; exit 1 ;; esac

log "fetching criu 4.1 and its libraries from Debian 13 (trixie)"
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/lists/partial" "$T/arch/partial" "$T/debs" "$T/root"
echo "deb $MIRROR trixie main" >"$T/sources.list"
A=(-o "Dir::State::Lists=$T/lists" -o "Dir::Etc::sourcelist=$T/sources.list" -o "Dir::Etc::sourceparts=-"
  -o "Dir::Cache::archives=$T/arch" -o "Dir::State::status=/dev/null" -o "APT::Architecture=$arch"
  -o "APT::Sandbox::User=root")
apt-get "${A[@]}" update -qq >/dev/null
# The package's whole dependency closure in trixie (what criu and its libraries link against).
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
# runc runs `criu swrk 3` from PATH; the wrapper runs the real one with the bundle's loader and
# libraries, and points it at denv's configuration (which runc's RPC mode reads from this variable).
cat >"$DIR.new/bin/criu" <<SH
#!/bin/sh
export CRIU_CONFIG_FILE="\${CRIU_CONFIG_FILE:-$DIR/denv.conf}"
exec "$DIR/lib/$loader" --library-path "$DIR/lib" "$DIR/bin/criu.real" "\$@"
SH
chmod 755 "$DIR.new/bin/criu"
# Established TCP connections are neither frozen in repair mode nor restored: the parent keeps
# using its own, a fork's copy finds them closed and reconnects (its addresses differ). Unix
# sockets to outside (none after denvd closes its agents' channels) and file locks are kept.
cat >"$DIR.new/denv.conf" <<CONF
tcp-close
file-locks
CONF
rm -rf "$DIR" && mv "$DIR.new" "$DIR"
if ! check; then
  log "criu check failed: $("$BIN/criu" check 2>&1 | tail -2 | tr '\n' ' ')"
  exit 1
fi
log "criu $("$BIN/criu" --version | head -1) ready in $BIN"
echo "$BIN"
