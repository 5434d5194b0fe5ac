#!/usr/bin/env bash
# Multi-process cluster test: three real parley-node processes with certificates made by
# `parley-node certs` form a cluster; outsiders are refused on the cluster port; one node is
# SIGKILLed and the others mark it down; it restarts and rejoins; SIGTERM leaves gracefully.
#
#   Scripts/tests/cluster-processes.sh [PATH-TO-parley-node]
source "$(dirname "$0")/lib.sh"
NODE="${1:-.build/debug/parley-node}"
[ -x "$NODE" ] || { echo "no parley-node binary at $NODE (build first)"; exit 2; }
NODE="$(cd "$(dirname "$NODE")" && pwd)/$(basename "$NODE")"
TOKEN="test-admin-token-0123456789"
NAMES=(node-1 node-2 node-3)
read -r -a PORTS <<<"$(free_ports 6)"
declare -A CLUSTER_PORT OPS_PORT NODE_PID
for i in 0 1 2; do
    CLUSTER_PORT[${NAMES[$i]}]=${PORTS[$i]}
    OPS_PORT[${NAMES[$i]}]=${PORTS[$((i + 3))]}
done
SEEDS="127.0.0.1:${PORTS[0]},127.0.0.1:${PORTS[1]},127.0.0.1:${PORTS[2]}"

echo "multi-process cluster test (work dir $WORK)"
"$NODE" certs init --dir "$WORK/tls" >/dev/null
for name in "${NAMES[@]}"; do "$NODE" certs issue "$name" --dir "$WORK/tls" >/dev/null; done
if openssl verify -CAfile "$WORK/tls/ca.pem" "$WORK/tls/node-1.pem" >/dev/null 2>&1; then
    pass "openssl verifies a node certificate made by parley-node certs"
else
    fail "openssl does not verify node-1.pem against ca.pem"
fi

start_node() {
    local name="$1"
    # Every node gets the same seed list, itself included.
    PARLEY_ADMIN_TOKEN="$TOKEN" "$NODE" run --name "$name" --tls-dir "$WORK/tls" \
        --cluster-port "${CLUSTER_PORT[$name]}" --ops-port "${OPS_PORT[$name]}" --seeds "$SEEDS" --data-dir "$WORK/data" \
        >>"$WORK/$name.log" 2>&1 &
    NODE_PID[$name]=$!
    PIDS+=("$!")
}

# cluster_json NAME: NAME's /v1/cluster.
cluster_json() { curl -s -m 2 -H "Authorization: Bearer $TOKEN" "http://127.0.0.1:${OPS_PORT[$1]}/v1/cluster"; }

# member_status VIEWER NAME: NAME's status (and incarnation) as VIEWER sees it.
member_field() {
    cluster_json "$1" | python3 -c "
import json, sys
view = json.load(sys.stdin)
print(next((str(m['$3']) for m in view['members'] if m['name'] == '$2'), 'absent'))"
}
has_status() { [ "$(member_field "$1" "$2" status)" = "$3" ]; }
ready() { [ "$(http_status "http://127.0.0.1:${OPS_PORT[$1]}/readyz")" = 200 ]; }
all_up_seen_by() {
    for other in "${NAMES[@]}"; do has_status "$1" "$other" up || return 1; done
}

for name in "${NAMES[@]}"; do start_node "$name"; done

if wait_until 30 "every /readyz is 200" bash -c "$(declare -f http_status); for p in ${OPS_PORT[node-1]} ${OPS_PORT[node-2]} ${OPS_PORT[node-3]}; do [ \"\$(http_status http://127.0.0.1:\$p/readyz)\" = 200 ] || exit 1; done"; then
    pass "three processes started with the same seed list are all ready"
else
    fail "not every node became ready"
fi

ok=1
for name in "${NAMES[@]}"; do
    wait_until 10 "$name sees all three up" all_up_seen_by "$name" || ok=0
done
[ "$ok" = 1 ] && pass "each member list names all three as up" || fail "member lists disagree"

if [ "$(http_status "http://127.0.0.1:${OPS_PORT[node-1]}/v1/cluster")" = 401 ]; then
    pass "/v1/cluster without the admin token is 401"
else
    fail "/v1/cluster answered without the admin token"
fi
workers="$(cluster_json node-2 | python3 -c 'import json,sys; v=json.load(sys.stdin); print(",".join(v["ring"]["workers"]), v["ring"]["virtualNodes"])')"
[ "$workers" = "node-1,node-2,node-3 128" ] && pass "the ring holds the three workers with 128 virtual nodes" || fail "ring is '$workers'"
if curl -s -m 2 "http://127.0.0.1:${OPS_PORT[node-1]}/metrics" | grep '^parley_ring_workers 3' >/dev/null; then
    pass "/metrics is Prometheus text with the ring size"
else
    fail "/metrics lacks parley_ring_workers 3"
fi

# Outsiders on the cluster port: openssl without a client certificate, and plain-text garbage.
# (stdin stays open a moment so that openssl reads the server's alert before it quits)
out="$( (sleep 1; echo hello) | timeout 5 openssl s_client -connect "127.0.0.1:${CLUSTER_PORT[node-1]}" -CAfile "$WORK/tls/ca.pem" -tls1_3 2>&1 || true)"
if echo "$out" | grep -qi "certificate required"; then
    pass "openssl s_client without a client certificate is refused (certificate required)"
else
    fail "openssl s_client without a certificate was not refused: $(echo "$out" | tail -3)"
fi
head -c 4096 /dev/urandom | timeout 5 curl -s -m 3 --data-binary @- "http://127.0.0.1:${CLUSTER_PORT[node-1]}/" >/dev/null 2>&1 || true
if ready node-1 && all_up_seen_by node-1; then
    pass "after the outsiders, node-1 is ready and still sees all three up"
else
    fail "node-1 suffered from outsiders"
fi

# SIGKILL node-3: the other two must mark it down within 5 s.
old_incarnation="$(member_field node-1 node-3 incarnation)"
kill -KILL "${NODE_PID[node-3]}"
wait "${NODE_PID[node-3]}" 2>/dev/null || true
if wait_until 5 "node-1 and node-2 mark node-3 down" bash -c "$(declare -f cluster_json member_field has_status); $(declare -p OPS_PORT); TOKEN=$TOKEN; has_status node-1 node-3 down && has_status node-2 node-3 down"; then
    pass "a SIGKILLed node is marked down by both survivors within 5 s"
else
    fail "node-3 was not marked down within 5 s"
fi
workers="$(cluster_json node-1 | python3 -c 'import json,sys; print(",".join(json.load(sys.stdin)["ring"]["workers"]))')"
[ "$workers" = "node-1,node-2" ] && pass "the down node left the ring" || fail "ring after the kill is '$workers'"

# Restart node-3: it rejoins as a new incarnation.
start_node node-3
if wait_until 15 "node-3 rejoins" bash -c "$(declare -f cluster_json member_field has_status all_up_seen_by); $(declare -p OPS_PORT NAMES); TOKEN=$TOKEN; all_up_seen_by node-1 && all_up_seen_by node-2 && all_up_seen_by node-3"; then
    new_incarnation="$(member_field node-1 node-3 incarnation)"
    if [ "$new_incarnation" -gt "$old_incarnation" ]; then
        pass "the restarted node rejoined with a higher incarnation ($old_incarnation -> $new_incarnation)"
    else
        fail "node-3 rejoined with incarnation $new_incarnation, not above $old_incarnation"
    fi
else
    fail "node-3 did not rejoin"
fi

# SIGTERM node-2: it leaves gracefully and exits within 5 s.
kill -TERM "${NODE_PID[node-2]}"
exited=0
for _ in $(seq 1 50); do
    if ! kill -0 "${NODE_PID[node-2]}" 2>/dev/null; then exited=1; break; fi
    sleep 0.1
done
[ "$exited" = 1 ] && pass "SIGTERM: node-2 exited within 5 s" || fail "node-2 still running 5 s after SIGTERM"
if wait_until 3 "node-1 sees node-2 left" has_status node-1 node-2 left; then
    pass "the others saw a graceful leave (left, not down)"
else
    fail "node-1 did not see node-2 leave: $(member_field node-1 node-2 status)"
fi

for name in node-1 node-3; do kill -TERM "${NODE_PID[$name]}" 2>/dev/null || true; done
for name in node-1 node-3; do wait "${NODE_PID[$name]}" 2>/dev/null || true; done
summary
