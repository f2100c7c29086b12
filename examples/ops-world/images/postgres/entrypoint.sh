#!/bin/bash
set -euo pipefail
if [ "${1:-}" = postgres ] && [ "$(id -u)" = 0 ]; then
  mkdir -p "$PGDATA" /run/postgresql
  chown postgres:postgres "$PGDATA" /run/postgresql
  chmod 700 "$PGDATA"
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    # As the official image: POSTGRES_PASSWORD_FILE (a file secret) instead of the value itself.
    if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then POSTGRES_PASSWORD=$(<"$POSTGRES_PASSWORD_FILE"); fi
    : "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD (or POSTGRES_PASSWORD_FILE) must be set}"
    pwfile=$(mktemp); printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"; chown postgres "$pwfile"
    setpriv --reuid=postgres --regid=postgres --init-groups \
      initdb -D "$PGDATA" -U "${POSTGRES_USER:-postgres}" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    if [ -n "${POSTGRES_DB:-}" ] && [ "${POSTGRES_DB}" != postgres ]; then
      setpriv --reuid=postgres --regid=postgres --init-groups postgres --single -D "$PGDATA" postgres \
        <<<"CREATE DATABASE \"$POSTGRES_DB\";" >/dev/null
    fi
  fi
  shift
  exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -c listen_addresses='*' "$@"
fi
exec "$@"
