# A throwaway PostgreSQL on a loopback port, for tests and benchmarks. Source it, then:
#   start_throwaway_postgres   sets PARLEY_TEST_POSTGRES_URL (exported) and PG_PID, or prints a
#                              loud "SKIPPED: PostgreSQL …" line and returns 1
#   stop_throwaway_postgres    stops exactly that server (its data folder, then its PID)
# initdb runs as the unprivileged `postgres` user in a temporary folder it owns (root cannot run
# postgres). `postgresql` is installed with apt when missing. `wal_init_zero=off`: a fresh server
# has no old WAL segments to reuse and zero-fills each new 16 MB one while every commit waits
# (docs/OPERATIONS.md, "PostgreSQL").

PG_DIR=""
PG_PID=""
PG_BIN=""

_pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }

start_throwaway_postgres() {
    local fsync="${1:-off}"  # tests: off (nothing here survives the run anyway); benchmarks: on
    PG_BIN="$(_pg_bin)"
    if [ -z "$PG_BIN" ] || ! id postgres >/dev/null 2>&1; then
        echo "== installing postgresql"
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }; then
            echo "SKIPPED: PostgreSQL — apt-get install postgresql failed; the PostgreSQL store suite does not run"
            return 1
        fi
        PG_BIN="$(_pg_bin)"
    fi
    if [ -z "$PG_BIN" ] || ! id postgres >/dev/null 2>&1; then
        echo "SKIPPED: PostgreSQL — no PostgreSQL binaries or no postgres user after installing; the PostgreSQL store suite does not run"
        return 1
    fi
    PG_DIR="$(mktemp -d -t parley-pg.XXXXXX)"
    chown postgres "$PG_DIR"
    local port
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
    if ! su postgres -s /bin/sh -c "'$PG_BIN/initdb' -D '$PG_DIR/data' -A trust -U postgres --no-sync" >"$PG_DIR/initdb.log" 2>&1; then
        echo "SKIPPED: PostgreSQL — initdb failed: $(tail -n 3 "$PG_DIR/initdb.log" | tr '\n' ' ')"
        return 1
    fi
    if ! su postgres -s /bin/sh -c "'$PG_BIN/pg_ctl' -D '$PG_DIR/data' -l '$PG_DIR/server.log' -w -t 30 \
        -o \"-c listen_addresses=127.0.0.1 -p $port -k '$PG_DIR' -c fsync=$fsync -c wal_init_zero=off -c max_connections=200\" start" >"$PG_DIR/pg_ctl.log" 2>&1; then
        echo "SKIPPED: PostgreSQL — the server did not start: $(tail -n 3 "$PG_DIR/server.log" 2>/dev/null | tr '\n' ' ')"
        return 1
    fi
    PG_PID="$(head -n 1 "$PG_DIR/data/postmaster.pid")"
    if ! su postgres -s /bin/sh -c "'$PG_BIN/createdb' -h 127.0.0.1 -p $port parley_test" >>"$PG_DIR/pg_ctl.log" 2>&1; then
        echo "SKIPPED: PostgreSQL — createdb failed"
        stop_throwaway_postgres
        return 1
    fi
    export PARLEY_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/parley_test"
    echo "== throwaway PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (pid $PG_PID; fsync=$fsync, wal_init_zero=off)"
}

stop_throwaway_postgres() {
    [ -n "$PG_DIR" ] || return 0
    if [ -n "$PG_PID" ] && kill -0 "$PG_PID" 2>/dev/null; then
        su postgres -s /bin/sh -c "'$PG_BIN/pg_ctl' -D '$PG_DIR/data' -m fast -w -t 20 stop" >/dev/null 2>&1 || kill -TERM "$PG_PID" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$PG_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$PG_PID" 2>/dev/null || true
    fi
    rm -rf "$PG_DIR"
    PG_DIR=""
    PG_PID=""
}
