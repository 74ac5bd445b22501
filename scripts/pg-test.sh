#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the advisor's tests, from Debian's
# postgresql package (scripts/setup.sh installs it): a fresh data
# directory in /tmp, a free port on loopback, trust authentication, no
# fsync, and a database `tern_test`.
#
#   eval "$(bash scripts/pg-test.sh start)"   # sets TERN_TEST_PG and TERN_PG_DIR
#   bash scripts/pg-test.sh stop "$TERN_PG_DIR"
#
# Run as root, the server runs as the postgres user (initdb refuses root).
set -euo pipefail

bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "pg-test: PostgreSQL is not installed (apt-get install postgresql)" >&2
    exit 1
fi
as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "${1:-}" in
start)
    dir=$(mktemp -d /tmp/tern-pg.XXXXXX)
    chmod 755 "$dir"
    [ "$(id -u)" = 0 ] && chown postgres: "$dir"
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    as_pg "$bin/initdb" -D "$dir/data" -A trust -U postgres --no-sync >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log" >&2; exit 1; }
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w \
        -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" \
        start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    as_pg "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres tern_test
    echo "export TERN_TEST_PG=postgres://postgres@127.0.0.1:$port/tern_test"
    echo "export TERN_PG_DIR=$dir"
    ;;
stop)
    dir=${2:?usage: pg-test.sh stop DIR}
    case "$dir" in /tmp/tern-pg.*) ;; *) echo "pg-test: not a test cluster: $dir" >&2; exit 1 ;; esac
    as_pg "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
*)
    echo "usage: pg-test.sh start | stop DIR" >&2
    exit 2
    ;;
esac
