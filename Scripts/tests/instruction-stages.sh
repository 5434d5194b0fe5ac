#!/usr/bin/env bash
# Scripts/bench-instructions' stages are cut right: a synthetic callgrind call graph (a commit and
# a request that both call malloc, the request also the runtime's task switch, a closure and a
# specialization of a stage's type, and a module's extension of another module's type) gives each stage its own instructions plus its share of what
# it calls, in proportion to each call's cost; mallocs and hops are counted by caller; the stages
# add up to the whole; an empty window is refused.
#
#   Scripts/tests/instruction-stages.sh
source "$(dirname "$0")/lib.sh"
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
echo "instruction-stages: a synthetic call graph cut into stages"
# Names that are not mangled pass through swift demangle as they are.
cat >"$WORK/callgrind.out.1.1" <<'GRAPH'
# callgrind format
version: 1
positions: line
events: Ir

fn=(1) root
0 0
cfn=(2) ParleyStoreSQLite.SQLiteChatStore.commit
calls=1 0
0 600
cfn=(3) Hummingbird.Router.respond
calls=1 0
0 400
cfn=(8) (extension in ParleyStoreSQLite):GRDB.Database.immediateTransaction
calls=1 0
0 100

fn=(2)
0 300
cfn=(4) malloc
calls=2 0
0 200
cfn=(5) generic specialization <ParleyChat.ChatEvent> of Swift.Array.append
calls=1 0
0 100

fn=(3)
0 100
cfn=(4)
calls=1 0
0 100
cfn=(6) swift_task_switch
calls=3 0
0 100
cfn=(7) closure #1 in ParleyChat.ConversationFanOut.consume
calls=1 0
0 100

fn=(4)
0 300

fn=(5)
0 100

fn=(6)
0 100

fn=(7)
0 100

fn=(8)
0 100
GRAPH
echo 10 >"$WORK/messages.txt"
echo '{"deliveries": 20, "acknowledged": 10}' >"$WORK/load.json"
table="$(python3 "$ROOT/Scripts/lib/instruction-stages.py" "$WORK")"
echo "$table" | sed 's/^/      /'
row() { echo "$table" | grep "^$1 " | tr -s ' ' | sed "s/^$1 //"; }
# Of 1,100 instructions: the commit 300 of its own, malloc's 200 (its calls cost 200 of malloc's
# 300), the specialization it calls (a generic of the standard library, named by no stage: 100)
# and the store module's extension of GRDB's Database (100).
[ "$(row "commit: SQLite and its write thread")" = "70 63.6% 0.2 0.0 0.00" ] && pass "the commit: its own, its share of malloc, the generic it called, its module's extension" \
    || fail "commit row: $(row "commit: SQLite and its write thread")"
# request: 100 own + malloc's 100.
[ "$(row "request: routing, authentication, body")" = "20 18.2% 0.1 0.3 0.00" ] && pass "the request: its own and its share of malloc; its hops" \
    || fail "request row: $(row "request: routing, authentication, body")"
[ "$(row "scheduling: tasks, executors, dispatch")" = "10 9.1% 0.0 0.0 0.00" ] && pass "the task switch is scheduling's" \
    || fail "scheduling row: $(row "scheduling: tasks, executors, dispatch")"
[ "$(row "delivery: fan-out, inboxes, streams")" = "10 9.1% 0.0 0.0 0.00" ] && pass "a closure belongs to its type's stage" \
    || fail "delivery row: $(row "delivery: fan-out, inboxes, streams")"
[ "$(row "all")" = "110 100.0% 0.3 0.3 0.00" ] && pass "the stages add up to the whole" || fail "all row: $(row "all")"
echo "$table" | head -1 | grep -q "10 messages in the window, 2.00 stream writes each" && pass "messages and stream writes from the load's report" \
    || fail "first line: $(echo "$table" | head -1)"
echo 0 >"$WORK/messages.txt"
if python3 "$ROOT/Scripts/lib/instruction-stages.py" "$WORK" >"$WORK/refused.txt" 2>&1; then
    fail "a window without messages was cut into stages"
else
    grep -q "no message was committed in the window" "$WORK/refused.txt" && pass "a window without messages is refused" || fail "refused without saying why: $(cat "$WORK/refused.txt")"
fi
summary
