# A highly available PostgreSQL on this machine: one etcd, three Patroni members (pg-1…pg-3, each
# a PostgreSQL of its own) in synchronous strict mode, and HAProxy routing one address to the
# member Patroni calls the primary. Source it with PGHA_DIR set (its data, configs, logs and PID
# files live there), then:
#   pgha_install            apt-get installs what is missing (patroni, etcd, haproxy, postgresql)
#   pgha_start              starts everything, waits for Leader + Sync Standby + Replica and for
#                           HAProxy to see exactly one primary, creates the database $PGHA_DB;
#                           prints nothing but progress; pgha_url then gives the store URL
#   pgha_member_start N     (re)starts member N's Patroni (it starts its PostgreSQL)
#   pgha_wait_member N S    waits up to S seconds for member N's own Patroni to say its
#                           PostgreSQL runs (its REST API's /health)
#   pgha_member_kill N      SIGKILLs member N's Patroni and its postmaster (by their PID files)
#   pgha_leader             the member that holds the leader lock (1–3), or nothing
#   pgha_status             each member: role, state, timeline, lag
#   pgha_stop               stops exactly what pgha_start started, by PID: HAProxy, the replicas,
#                           the leader, any postmaster a killed Patroni left, etcd
# Ports (PGHA_PORT_BASE, 15400 unless set): HAProxy BASE, its stats page BASE+80, member N's
# PostgreSQL BASE+N and Patroni REST BASE+10+N, etcd BASE+20 (peer BASE+21); members listen on
# 127.0.0.1N so a member's address says which it is. Everything runs at nice 19: on a busy
# machine a starved Patroni misses its lease and fails over for nothing.
#
# As separate hosts (Scripts/cluster up --postgres-ha --netns): PGHA_HOSTS="A1 A2 A3" are the
# members' addresses, PGHA_NETNS_PREFIX makes member N run in the namespace PREFIX-N (which the
# caller made, its address A_N on a bridge), PGHA_FRONT_HOST is the address etcd and HAProxy
# listen on (the bridge's own), and PGHA_TRUST_NET the subnet the members and nodes share.
#
# The timeouts bound a failover (measured in docs/BENCHMARKS.md): the leader renews its lease
# every LOOP_WAIT s and holds it TTL s; an isolated leader demotes itself after RETRY_TIMEOUT s
# (LOOP_WAIT + 2 × RETRY_TIMEOUT ≤ TTL keeps it gone before another can take the lock).

PGHA_DIR="${PGHA_DIR:-}"
PGHA_DB="${PGHA_DB:-parley}"
PGHA_PORT_BASE="${PGHA_PORT_BASE:-15400}"
PGHA_TTL="${PGHA_TTL:-10}"
PGHA_LOOP_WAIT="${PGHA_LOOP_WAIT:-2}"
PGHA_RETRY_TIMEOUT="${PGHA_RETRY_TIMEOUT:-4}"
# 300 is Patroni's default: a crashed primary PostgreSQL is recovered in place while its Patroni
# keeps the lock. 0: the synchronous standby takes over at once.
PGHA_PRIMARY_START_TIMEOUT="${PGHA_PRIMARY_START_TIMEOUT:-300}"
# PGHA_NICENESS: 19 unless set (a benchmark that compares stores runs them at 0).
PGHA_NICE=(nice -n "${PGHA_NICENESS:-19}")

_pgha_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
pgha_host() { if [ -n "${PGHA_HOSTS:-}" ]; then echo "$PGHA_HOSTS" | cut -d' ' -f "$1"; else echo "127.0.0.1$1"; fi; }
pgha_front_host() { echo "${PGHA_FRONT_HOST:-127.0.0.1}"; }
pgha_pg_port() { echo $((PGHA_PORT_BASE + $1)); }
pgha_rest_port() { echo $((PGHA_PORT_BASE + 10 + $1)); }
pgha_haproxy_port() { echo "$PGHA_PORT_BASE"; }
pgha_stats_port() { echo $((PGHA_PORT_BASE + 80)); }
_pgha_etcd_host() { echo "${PGHA_FRONT_HOST:-127.0.0.10}"; }
pgha_etcd() { echo "$(_pgha_etcd_host):$((PGHA_PORT_BASE + 20))"; }
pgha_url() { echo "postgres://postgres@$(pgha_front_host):$(pgha_haproxy_port)/$PGHA_DB"; }
_pgha_alive() { [ -f "$1" ] && kill -0 "$(head -n 1 "$1")" 2>/dev/null; }
_pgha_log() { echo "== $(date +%T) postgres-ha: $*"; }

pgha_install() {
    local missing=()
    for binary in etcd etcdctl patroni patronictl haproxy setpriv jq; do command -v "$binary" >/dev/null || missing+=("$binary"); done
    [ -n "$(_pgha_bin)" ] || missing+=(postgresql)
    [ ${#missing[@]} -eq 0 ] && return 0
    _pgha_log "installing (missing: ${missing[*]})"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        postgresql patroni etcd-server etcd-client python3-etcd haproxy jq >/dev/null || {
        echo "postgres-ha: apt-get install of patroni, etcd-server, etcd-client, haproxy, postgresql failed" >&2
        return 1
    }
}

_pgha_start_etcd() {
    _pgha_alive "$PGHA_DIR/etcd.pid" && return 0
    mkdir -p "$PGHA_DIR/etcd"
    local client peer
    client="$(pgha_etcd)" peer="$(_pgha_etcd_host):$((PGHA_PORT_BASE + 21))"
    # One etcd: the consensus store of a test cluster on one machine, not what it tests.
    (exec "${PGHA_NICE[@]}" etcd --name e1 --data-dir "$PGHA_DIR/etcd/data" \
        --listen-client-urls "http://$client" --advertise-client-urls "http://$client" \
        --listen-peer-urls "http://$peer" --initial-advertise-peer-urls "http://$peer" \
        --initial-cluster "e1=http://$peer" --initial-cluster-state new --initial-cluster-token parley \
        >>"$PGHA_DIR/etcd/etcd.log" 2>&1) &
    echo $! >"$PGHA_DIR/etcd.pid"
    for _ in $(seq 1 100); do
        ETCDCTL_API=3 etcdctl --endpoints "http://$client" endpoint health >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "postgres-ha: etcd did not become healthy (see $PGHA_DIR/etcd/etcd.log)" >&2
    return 1
}

_pgha_member_config() {
    local i=$1 dir="$PGHA_DIR/pg-$1" host port rest
    host="$(pgha_host "$i")" port="$(pgha_pg_port "$i")" rest="$(pgha_rest_port "$i")"
    cat >"$dir/patroni.yml" <<EOF
scope: parley
namespace: /parley/
name: pg-$i
log: {level: INFO}
restapi: {listen: '$host:$rest', connect_address: '$host:$rest'}
etcd3: {hosts: '$(pgha_etcd)'}
bootstrap:
  dcs:
    ttl: $PGHA_TTL
    loop_wait: $PGHA_LOOP_WAIT
    retry_timeout: $PGHA_RETRY_TIMEOUT
    primary_start_timeout: $PGHA_PRIMARY_START_TIMEOUT
    maximum_lag_on_failover: 1048576
    # Strict: with its synchronous standby gone the primary waits rather than acknowledging a
    # commit only it holds, which a later failover would lose.
    synchronous_mode: true
    synchronous_mode_strict: true
    synchronous_node_count: 1
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        max_connections: 200
        shared_buffers: 64MB
        wal_level: replica
        hot_standby: 'on'
        wal_log_hints: 'on'
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 128MB
        synchronous_commit: 'on'
        wal_init_zero: 'off'
        wal_retrieve_retry_interval: 1s
  initdb: [{encoding: UTF8}, data-checksums]
postgresql:
  listen: '$host:$port'
  connect_address: '$host:$port'
  use_unix_socket: true
  data_dir: '$dir/data'
  bin_dir: '$(_pgha_bin)'
  pgpass: '$dir/pgpass'
  authentication:
    superuser: {username: postgres, password: postgres}
    replication: {username: replicator, password: replicator}
    rewind: {username: rewinder, password: rewinder}
  parameters: {unix_socket_directories: '$dir', logging_collector: 'on', log_directory: '$dir/log'}
  pg_hba:
  - local all all trust
  - host all all 127.0.0.0/8 trust
  - host replication replicator 127.0.0.0/8 trust$([ -n "${PGHA_TRUST_NET:-}" ] && printf '\n  - host all all %s trust\n  - host replication replicator %s trust' "$PGHA_TRUST_NET" "$PGHA_TRUST_NET")
  basebackup: [{checkpoint: fast}]
watchdog: {mode: 'off'}
EOF
    chown postgres:postgres "$dir/patroni.yml"
    chmod 600 "$dir/patroni.yml"
}

pgha_member_start() {
    local i=$1 dir="$PGHA_DIR/pg-$1"
    _pgha_alive "$dir/patroni.pid" && return 0
    mkdir -p "$dir"
    chown postgres:postgres "$dir"
    chmod 700 "$dir"
    _pgha_member_config "$i"
    local -a netns=()
    [ -n "${PGHA_NETNS_PREFIX:-}" ] && netns=(ip netns exec "$PGHA_NETNS_PREFIX-$i")
    # exec all the way down (ip netns exec, env, nice and setpriv exec; su would fork): $! is
    # Patroni's PID.
    (cd "$dir" && exec "${netns[@]}" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$dir" LANG=C.UTF-8 \
        "${PGHA_NICE[@]}" setpriv --reuid=postgres --regid=postgres --init-groups /usr/bin/patroni "$dir/patroni.yml" \
        >>"$dir/patroni.log" 2>&1) &
    echo $! >"$dir/patroni.pid"
}

# The member's own Patroni, not the list in etcd: etcd keeps a killed member's entry, as it was,
# until its lease ends, so a restarted member would look healthy there before it is.
pgha_wait_member() {
    local i=$1 seconds=$2
    for _ in $(seq 1 "$seconds"); do
        [ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://$(pgha_host "$i"):$(pgha_rest_port "$i")/health" || true)" = 200 ] && return 0
        sleep 1
    done
    return 1
}

pgha_member_kill() {
    local i=$1 dir="$PGHA_DIR/pg-$1" pid
    for file in "$dir/patroni.pid" "$dir/data/postmaster.pid"; do
        pid="$(head -n 1 "$file" 2>/dev/null || true)"
        [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    done
    return 0
}

# SIGKILLs member N's PostgreSQL postmaster only; its Patroni restarts it (or hands over the lead).
pgha_postgres_kill() {
    local pid
    pid="$(head -n 1 "$PGHA_DIR/pg-$1/data/postmaster.pid" 2>/dev/null || true)"
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
}

_pgha_list() { timeout 10 "${PGHA_NICE[@]}" patronictl -c "$PGHA_DIR/pg-1/patroni.yml" list -f json 2>/dev/null || echo '[]'; }

pgha_leader() { _pgha_list | jq -r '.[] | select(.Role == "Leader") | .Member | ltrimstr("pg-")'; }

# The number of the first running member in ROLE ("Sync Standby", "Replica"), if any.
pgha_member_in_role() {
    local i
    for i in $(_pgha_list | jq -r --arg role "$1" '.[] | select(.Role == $role and (.State == "running" or .State == "streaming")) | .Member | ltrimstr("pg-")'); do
        _pgha_alive "$PGHA_DIR/pg-$i/patroni.pid" && { echo "$i"; return 0; }
    done
    return 0
}

# Every member, a line each. etcd keeps a dead member's entry until its lease ends, so a member
# whose Patroni is not running is "down" whatever the list says.
pgha_status() {
    local members i
    members="$(_pgha_list)"
    for i in 1 2 3; do
        if ! _pgha_alive "$PGHA_DIR/pg-$i/patroni.pid"; then echo "pg-$i  down (Patroni not running)"; continue; fi
        jq -r --arg name "pg-$i" '(map(select(.Member == $name)) | first) as $m
            | if $m == null then "\($name)  down" else "\($name)  \($m.Role)  \($m.State)  timeline \($m.TL // "-")  lag \($m["Lag in MB"] // 0) MB" end' <<<"$members"
    done
}

# Waits until `want` members run, one of them Leader and (for 2 or more) one Sync Standby.
pgha_wait_healthy() {
    local want=$1 seconds=$2 members
    for _ in $(seq 1 "$seconds"); do
        members="$(_pgha_list)"
        if [ "$(jq '[.[] | select(.State == "running" or .State == "streaming")] | length' <<<"$members")" -ge "$want" ] &&
            [ "$(jq '[.[] | select(.Role == "Leader")] | length' <<<"$members")" = 1 ] &&
            { [ "$want" = 1 ] || [ "$(jq '[.[] | select(.Role == "Sync Standby")] | length' <<<"$members")" = 1 ]; }; then
            return 0
        fi
        sleep 1
    done
    echo "postgres-ha: not $want healthy members after ${seconds}s:" >&2
    pgha_status >&2
    return 1
}

_pgha_start_haproxy() {
    _pgha_alive "$PGHA_DIR/haproxy.pid" && return 0
    mkdir -p "$PGHA_DIR/haproxy"
    {
        cat <<EOF
global
    maxconn 1000
defaults
    mode tcp
    retries 2
    timeout connect 1s
    timeout client 30m
    timeout server 30m
    timeout check 1s
# Only the member whose Patroni answers 200 to GET /primary (it holds the leader lock). When
# that member is marked down, its clients' sessions are cut (on-marked-down shutdown-sessions):
# they reconnect and reach the new primary instead of waiting on a dead one.
listen postgres_rw
    bind $(pgha_front_host):$(pgha_haproxy_port)
    option httpchk
    http-check send meth GET uri /primary
    http-check expect status 200
    default-server inter 500ms fastinter 250ms downinter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
EOF
        for i in 1 2 3; do echo "    server pg-$i $(pgha_host "$i"):$(pgha_pg_port "$i") check port $(pgha_rest_port "$i")"; done
        cat <<EOF
listen stats
    mode http
    bind $(pgha_front_host):$(pgha_stats_port)
    stats enable
    stats uri /
EOF
    } >"$PGHA_DIR/haproxy/haproxy.cfg"
    haproxy -c -q -f "$PGHA_DIR/haproxy/haproxy.cfg" || return 1
    (exec "${PGHA_NICE[@]}" haproxy -f "$PGHA_DIR/haproxy/haproxy.cfg" >>"$PGHA_DIR/haproxy/haproxy.log" 2>&1) &
    echo $! >"$PGHA_DIR/haproxy.pid"
    # HAProxy starts with every server up until its first checks: wait until exactly one is.
    local up=""
    for _ in $(seq 1 100); do
        up="$({ curl -s "http://$(pgha_front_host):$(pgha_stats_port)/;csv" || true; } | awk -F, '$1 == "postgres_rw" && $2 ~ /^pg-/ && $18 == "UP"' | wc -l)"
        [ "$up" = 1 ] && return 0
        sleep 0.2
    done
    echo "postgres-ha: HAProxy does not see exactly one primary (see $PGHA_DIR/haproxy/haproxy.log)" >&2
    return 1
}

pgha_start() {
    [ -n "$PGHA_DIR" ] || { echo "postgres-ha: PGHA_DIR is not set" >&2; return 1; }
    id postgres >/dev/null 2>&1 || { echo "postgres-ha: no postgres user (install postgresql)" >&2; return 1; }
    mkdir -p "$PGHA_DIR"
    chmod 755 "$PGHA_DIR"
    # Patroni and PostgreSQL run as postgres, which must reach their folders.
    setpriv --reuid=postgres --regid=postgres --init-groups test -x "$PGHA_DIR" || {
        echo "postgres-ha: the postgres user cannot reach $PGHA_DIR (a folder above it is closed to others)" >&2
        return 1
    }
    _pgha_log "etcd on $(pgha_etcd)"
    _pgha_start_etcd || return 1
    _pgha_log "pg-1 (the first member initialises the cluster)"
    pgha_member_start 1
    pgha_wait_healthy 1 120 || return 1
    _pgha_log "pg-2 and pg-3 (copies of pg-1)"
    pgha_member_start 2
    pgha_member_start 3
    pgha_wait_healthy 3 300 || return 1
    _pgha_log "HAProxy on $(pgha_front_host):$(pgha_haproxy_port) (stats http://$(pgha_front_host):$(pgha_stats_port)/)"
    _pgha_start_haproxy || return 1
    local psql exists
    psql="$(_pgha_bin)/psql"
    exists="$("$psql" -X -h "$(pgha_front_host)" -p "$(pgha_haproxy_port)" -U postgres -d postgres -tAc "SELECT count(*) FROM pg_database WHERE datname = '$PGHA_DB'")" || return 1
    [ "$exists" = 1 ] || "$psql" -X -q -h "$(pgha_front_host)" -p "$(pgha_haproxy_port)" -U postgres -d postgres -c "CREATE DATABASE $PGHA_DB" || return 1
}

# _pgha_stop_pid PID PATTERN SIGNAL SECONDS: only while PID still runs a command line holding
# PATTERN (a recycled PID is left alone); SIGKILL after SECONDS.
_pgha_stop_pid() {
    local pid=$1 pattern=$2 signal=$3 seconds=$4
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$pattern" || return 0
    kill "-$signal" "$pid" 2>/dev/null
    for _ in $(seq 1 $((seconds * 10))); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
}

pgha_stop() {
    [ -n "$PGHA_DIR" ] && [ -d "$PGHA_DIR" ] || return 0
    _pgha_stop_pid "$(head -n 1 "$PGHA_DIR/haproxy.pid" 2>/dev/null)" haproxy TERM 10
    # The replicas first: stopping the leader first would hand its lock to one of them.
    local leader="" order="" i pid
    [ -f "$PGHA_DIR/pg-1/patroni.yml" ] && leader="$(pgha_leader 2>/dev/null || true)"
    for i in 1 2 3; do [ "$i" != "$leader" ] && order="$order $i"; done
    [ -n "$leader" ] && order="$order $leader"
    for i in $order; do _pgha_stop_pid "$(head -n 1 "$PGHA_DIR/pg-$i/patroni.pid" 2>/dev/null)" patroni TERM 60; done
    for i in 1 2 3; do
        pid="$(head -n 1 "$PGHA_DIR/pg-$i/data/postmaster.pid" 2>/dev/null || true)"
        # SIGINT is pg_ctl's fast shutdown.
        _pgha_stop_pid "$pid" "$PGHA_DIR/pg-$i/data" INT 30
    done
    _pgha_stop_pid "$(head -n 1 "$PGHA_DIR/etcd.pid" 2>/dev/null)" etcd TERM 10
}
