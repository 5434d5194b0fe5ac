# Helpers for Parley's multi-process tests. Source it; it sets `set -euo pipefail`.
# Every process a test starts is recorded in PIDS and stopped by exactly that PID on exit.
set -euo pipefail

PASSED=0
FAILED=0
PIDS=()
WORK="$(mktemp -d -t parley-test.XXXXXX)"

cleanup() {
    local pid
    for pid in "${PIDS[@]:-}"; do
        [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

pass() { PASSED=$((PASSED + 1)); echo "  ok    $*"; }
fail() {
    FAILED=$((FAILED + 1))
    echo "  FAIL  $*"
    local log
    for log in "$WORK"/*.log; do
        [ -f "$log" ] || continue
        echo "----- $(basename "$log") (last 40 lines)"
        tail -n 40 "$log"
    done
}

# free_port_ranges N…: for each N, the first of N consecutive free loopback ports, the ranges apart
# (Scripts/cluster's port bases: cluster, operations, client).
free_port_ranges() {
    python3 - "$@" <<'PY'
import socket, random, sys
def free(base, count):
    for p in range(base, base + count):
        s = socket.socket()
        try: s.bind(("127.0.0.1", p))
        except OSError: return False
        finally: s.close()
    return True
ranges = []
for count in map(int, sys.argv[1:]):
    while True:
        b = random.randrange(20000, 60000 - count, 10)
        if free(b, count) and all(b + count <= o or o + n <= b for o, n in ranges):
            ranges.append((b, count)); break
print(*(b for b, _ in ranges))
PY
}

# free_ports N: N distinct free loopback TCP ports.
free_ports() {
    python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
for s in socks: s.close()
PY
}

# wait_until SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.1 s until it succeeds.
wait_until() {
    local seconds="$1" what="$2"
    shift 2
    local deadline=$(( $(date +%s%N) + seconds * 1000000000 ))
    while [ "$(date +%s%N)" -lt "$deadline" ]; do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    "$@" >/dev/null 2>&1 && return 0
    echo "  timed out after ${seconds}s waiting until $what"
    return 1
}

# http_status URL: the HTTP status code, 000 when nothing answered.
http_status() { curl -s -o /dev/null -m 2 -w '%{http_code}' "$@" || true; }

summary() {
    echo "$PASSED passed, $FAILED failed"
    [ "$FAILED" -eq 0 ]
}
