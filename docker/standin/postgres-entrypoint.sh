#!/bin/sh
# The official postgres image's first start, reduced to what compose.yaml uses: a cluster owned
# by POSTGRES_USER with POSTGRES_PASSWORD, database POSTGRES_DB, password logins over TCP.
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
mkdir -p "$PGDATA" /var/run/postgresql
chown postgres "$PGDATA" /var/run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile="$(mktemp)"
  printf '%s\n' "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD is required}" >"$pwfile"
  chown postgres "$pwfile"
  runuser -u postgres -- initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" \
    --auth-local=trust --auth-host=scram-sha-256 -E UTF8 >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  if [ "$POSTGRES_DB" != postgres ]; then
    runuser -u postgres -- pg_ctl -D "$PGDATA" -w -o "-c listen_addresses=''" start >/dev/null
    runuser -u postgres -- createdb -U "$POSTGRES_USER" "$POSTGRES_DB"
    runuser -u postgres -- pg_ctl -D "$PGDATA" -w stop >/dev/null
  fi
fi
# As the official image: a command of `postgres ARGS...` passes ARGS to the server.
[ "${1:-}" = postgres ] && shift
exec runuser -u postgres -- postgres -D "$PGDATA" -c listen_addresses='*' "$@"
