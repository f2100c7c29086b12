#!/bin/sh
# denv host installer, served by a denv server at /install.sh:
#
#   curl -fsSL SERVER/install.sh | sh -s -- --token T --server URL [--zfs-pool NAME | --btrfs-pool PATH] [--name NAME]
#
# Turns a Linux machine with Docker into a denv host: downloads the denvd executable for this
# architecture from the server, joins with the single-use token (denv host join-token), installs
# denvd as a systemd service (or, without systemd, starts it in the background and says how to
# start it at boot), and reports what the host told the server. Run again, it upgrades denvd in
# place and keeps the host's identity (the token is then not needed). Every check runs before
# anything is changed: a bad token, an unreachable server, a missing Docker or an unsupported
# architecture stops it with the reason and leaves the machine as it was.
set -eu

SERVER="__DENV_SERVER__"
TOKEN=""
NAME=""
STORAGE_ARGS=""
BIN=/usr/local/bin/denvd
STATE=/var/lib/denvd
UNIT=/etc/systemd/system/denvd.service
LOG=/var/log/denvd.log
PIDFILE=/run/denvd.pid

say() { printf 'denv: %s\n' "$*"; }
fail() { printf 'denv: error: %s\n' "$*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --token) TOKEN=${2:-}; shift 2 ;;
    --server) SERVER=${2:-}; shift 2 ;;
    --name) NAME=${2:-}; shift 2 ;;
    --zfs-pool) STORAGE_ARGS="--zfs-pool ${2:-}"; shift 2 ;;
    --btrfs-pool) STORAGE_ARGS="--storage btrfs --btrfs-pool ${2:-}"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" 2>/dev/null || true; exit 0 ;;
    *) fail "unknown option $1 (options: --token T --server URL [--zfs-pool NAME | --btrfs-pool PATH] [--name NAME])" ;;
  esac
done
SERVER=${SERVER%/}

# --- checks: nothing is changed before all of them pass ----------------------------------------------
[ "$(id -u)" = 0 ] || fail "run as root (it installs /usr/local/bin/denvd and a system service)"
case "$(uname -m)" in
  x86_64|amd64) ARCH=x86_64 ;;
  aarch64|arm64) ARCH=aarch64 ;;
  *) fail "unsupported architecture $(uname -m): denvd is built for x86_64 and aarch64" ;;
esac
command -v docker >/dev/null 2>&1 || fail "Docker is not installed: install it first (Debian/Ubuntu: apt-get install docker.io), then run this again"
docker info >/dev/null 2>&1 || fail "Docker is installed but its engine does not answer (is dockerd running? try: systemctl start docker)"
# fetch URL FILE: the body into FILE when the server answers 200; otherwise $why says which: not
# reached at all, or the status it answered with the server's own message (a 404 is not "unreachable").
why=""
# The server's words are shown, never its control bytes: a hostile answer cannot drive the terminal.
said() { sed -n 's/.*"message": *"\([^"]*\)".*/: \1/p' "$1" 2>/dev/null | head -c 300 | tr -cd '[:print:]'; }
if command -v curl >/dev/null 2>&1; then
  fetch() {
    code=$(curl -sSL --max-time 300 -o "$2" -w '%{http_code}' "$1" 2>"$tmp/fetch.err") ||
      { why="cannot be reached ($(head -c 200 "$tmp/fetch.err"))"; return 1; }
    [ "$code" = 200 ] && return 0
    why="answered $code$(said "$2")"
    return 1
  }
elif command -v wget >/dev/null 2>&1; then
  fetch() {
    wget -q --content-on-error -T 300 -O "$2" "$1" 2>"$tmp/fetch.err" && return 0
    # wget's exit 8: the server answered with an error status.
    [ $? = 8 ] && why="answered an error$(said "$2")" || why="cannot be reached"
    return 1
  }
else
  fail "neither curl nor wget is installed"
fi
[ -n "$SERVER" ] || fail "--server URL is required"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fetch "$SERVER/v1/downloads/denvd.version" "$tmp/version" ||
  fail "the denv server at $SERVER $why: check the URL (the server's own, as \`denv host join-token\` prints it) and that this machine can reach it"
fetch "$SERVER/v1/downloads/denvd-linux-$ARCH" "$tmp/denvd" || fail "downloading denvd for $ARCH from $SERVER failed: it $why"
chmod 0755 "$tmp/denvd"
NEW_VERSION=$("$tmp/denvd" --version 2>/dev/null) || fail "the downloaded denvd does not run on this machine"

UPGRADE=0
if [ -f "$STATE/host.json" ]; then
  UPGRADE=1
  OLD_VERSION=$("$BIN" --version 2>/dev/null || echo unknown)
else
  [ -n "$TOKEN" ] || fail "--token is required for a new host (denv host join-token prints one)"
  # Joining is the last check: a refused token leaves nothing behind.
  join_dir="$tmp/state"
  set -- join --server "$SERVER" --token "$TOKEN" --state-dir "$join_dir" --storage dir
  [ -n "$NAME" ] && set -- "$@" --name "$NAME"
  # shellcheck disable=SC2086
  "$tmp/denvd" "$@" $STORAGE_ARGS >"$tmp/join.out" 2>&1 || fail "joining failed: $(sed 's/^denvd: //' "$tmp/join.out")"
fi

# --- install -----------------------------------------------------------------------------------------
# A process that exited but was not reaped yet (a zombie) counts as gone.
alive() { [ -r "/proc/$1/stat" ] && [ "$(sed 's/^.*) //' "/proc/$1/stat" | cut -d' ' -f1)" != Z ]; }
stop_running() {
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1 && [ -f "$UNIT" ]; then
    systemctl stop denvd 2>/dev/null || true
  elif [ -f "$PIDFILE" ] && alive "$(cat "$PIDFILE")"; then
    pid=$(cat "$PIDFILE")
    kill "$pid" 2>/dev/null || true
    i=0
    while alive "$pid" && [ $i -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
    # Never two denvds for one host: one that did not stop in 10 s is killed.
    alive "$pid" && kill -9 "$pid" 2>/dev/null || true
  fi
}
[ "$UPGRADE" = 1 ] && stop_running
mkdir -p "$STATE"
chmod 0700 "$STATE"
if [ "$UPGRADE" = 0 ]; then
  cp "$join_dir/host.json" "$STATE/host.json"
  chmod 0600 "$STATE/host.json"
fi
install -m 0755 "$tmp/denvd" "$BIN.new"
mv -f "$BIN.new" "$BIN"
rm -f "$STATE/status.json"

if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  cat >"$UNIT" <<UNIT
[Unit]
Description=denv host sidecar (denvd)
After=docker.service network-online.target
Wants=network-online.target
Requires=docker.service

[Service]
ExecStart=$BIN run --state-dir $STATE
Restart=always
RestartSec=2

[Install]
WantedBy=multi-user.target
UNIT
  systemctl daemon-reload
  systemctl enable --now denvd >/dev/null 2>&1 || systemctl restart denvd
  HOW="systemd service denvd (systemctl status denvd; journalctl -u denvd)"
else
  say "systemd is not running here: starting denvd in the background (log $LOG, pid $PIDFILE)."
  say "To start it at boot, have your init system run: $BIN run --state-dir $STATE"
  nohup "$BIN" run --state-dir "$STATE" >>"$LOG" 2>&1 &
  echo $! >"$PIDFILE"
  HOW="background process $(cat "$PIDFILE") (log $LOG)"
fi

# --- report ------------------------------------------------------------------------------------------
i=0
while [ ! -s "$STATE/status.json" ] && [ $i -lt 150 ]; do sleep 0.2; i=$((i + 1)); done
[ -s "$STATE/status.json" ] || fail "denvd was installed but has not connected to $SERVER within 30 s; see the $HOW"
if [ "$UPGRADE" = 1 ]; then
  say "upgraded denvd $OLD_VERSION -> $NEW_VERSION, same host identity; running as $HOW"
else
  say "installed denvd $NEW_VERSION and joined $SERVER; running as $HOW"
fi
say "this host reported: $(cat "$STATE/status.json")"
