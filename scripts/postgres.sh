#!/usr/bin/env bash
# A throwaway PostgreSQL server for Airflow's metadata, as in production but local:
#   scripts/postgres.sh start DIR [PORT]   -> prints the SQLAlchemy URL of database "airflow"
#   scripts/postgres.sh stop DIR
# Installs Debian's `postgresql` package when no server binaries are found. The data
# directory, socket and log live under DIR; the server listens on 127.0.0.1:PORT only
# (default: a free port) and trusts local connections (nothing else can reach it).
set -euo pipefail

find_bin() {
  local dir
  for dir in /usr/lib/postgresql/*/bin; do
    [[ -x "$dir/pg_ctl" ]] && { echo "$dir"; return; }
  done
  return 1
}

install_server() {
  echo "installing Debian's postgresql package" >&2
  export DEBIAN_FRONTEND=noninteractive
  ${SUDO:-} apt-get update -qq >&2
  ${SUDO:-} apt-get install -y -qq --no-install-recommends postgresql >&2
}

# initdb refuses to run as root: the server then runs as the package's `postgres` user.
as_owner() {
  if [[ "$(id -u)" == 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

cmd="${1:?usage: $0 start|stop DIR [PORT]}"
dir="$(mkdir -p "${2:?usage: $0 start|stop DIR [PORT]}" && cd "$2" && pwd)"
[[ "$(id -u)" == 0 ]] || SUDO=sudo
bin="$(find_bin || { install_server; find_bin; })"

case "$cmd" in
  start)
    port="${3:-$(free_port)}"
    [[ "$(id -u)" == 0 ]] && chown postgres "$dir"
    if [[ ! -f "$dir/data/PG_VERSION" ]]; then
      as_owner "$bin/initdb" -D "$dir/data" -U airflow --auth=trust -E UTF8 >"$dir/initdb.log"
    fi
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $dir" >/dev/null
    as_owner "$bin/createdb" -h 127.0.0.1 -p "$port" -U airflow airflow 2>/dev/null || true
    echo "postgresql+psycopg2://airflow@127.0.0.1:$port/airflow"
    ;;
  stop)
    as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    ;;
  *)
    echo "usage: $0 start|stop DIR [PORT]" >&2
    exit 2
    ;;
esac
