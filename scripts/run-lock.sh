# Sourced at the top of a script that must run once at a time on this machine (the README's
# commands, CI, the host's set-up), with DENV_LOCK naming the lock (run, setup). The first comes
# through; a second waits, saying for whom, then goes on. The script is re-executed under flock(1),
# which holds the lock until the script ends; -o closes it for the script, so nothing the script
# starts in the background (dockerd, the registry) keeps holding it. A script already inside the
# lock (CI's .ci/run calling test.sh) does not wait on itself: DENV_LOCKED_<name> marks it.
_denv_lock_var="DENV_LOCKED_${DENV_LOCK:?DENV_LOCK names the lock}"
if [ -z "${!_denv_lock_var:-}" ] && command -v flock >/dev/null; then
  _denv_lock_file="/var/lock/denv-$DENV_LOCK.lock"
  _denv_script=$(realpath "${BASH_SOURCE[1]}")
  if ! flock -n "$_denv_lock_file" true 2>/dev/null; then
    echo "[lock] $(cat "$_denv_lock_file.who" 2>/dev/null || echo "another run") holds $_denv_lock_file; waiting for it to end" >&2
  fi
  export "$_denv_lock_var=1"
  exec flock -o "$_denv_lock_file" bash -c \
    'echo "pid $$ ($(basename "$1"), since $(date -u +%H:%M:%S))" >"$0.who"; exec bash "$@"' \
    "$_denv_lock_file" "$_denv_script" "$@"
fi
unset _denv_lock_var
