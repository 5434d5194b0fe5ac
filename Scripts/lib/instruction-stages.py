"""Cuts a callgrind call graph of parley-node into the stages a message crosses.

  instruction-stages.py DIR            the table for the count in DIR (Scripts/bench-instructions)
  instruction-stages.py --compare A B  two counts' tables side by side (A the baseline)

A stage begins at the functions its pattern names (matched on the demangled, module-qualified
name of the function or of the closure's or specialization's context). A function no pattern
names belongs to the stages of its callers, in proportion to what each call costs (what gprof
does): a malloc called from SQLite is the commit's, from the router the request's. Every
instruction of the window lands in one stage, so the stages add up to the whole. Calls are
attributed the same way: allocations (malloc), hops (jobs enqueued, actor switches,
continuations resumed, tasks created) and parks (calls that can block the thread: futex waits,
epoll waits, condition waits).
"""
import collections
import glob
import json
import os
import re
import subprocess
import sys

# (stage, pattern) in order; the first that matches a function's qualified name wins.
STAGES = [
    ("commit: SQLite and its write thread", r"^(ParleyStoreSQLite\.|\(extension in ParleyStoreSQLite\):|GRDB\.|ParleyChat\.(CommitThread|GroupCommitter|CommitStateMachine)\b|ParleyModel\.SearchText\b)|^sqlite3|^fts5|^sqlite3Fts5"),
    ("TLS (NIOSSL, BoringSSL)", r"^(NIOSSL\w*\.)|^(bssl::|SSL_|ssl3?_|tls13?_|EVP_|CRYPTO_|aes_|gcm_|chacha|x25519|ec_|BN_|ERR_|OPENSSL_|CBB_|CBS_)"),
    ("HTTP/2 framing and HPACK", r"^(NIOHTTP2\.|NIOHPACK\.|ParleyGateway\.(HTTP2Connection|OutboundGoAwayScanner|WriteCoalescer)\b)"),
    ("event loop and sockets (NIOPosix)", r"^NIOPosix\."),
    ("request: routing, authentication, body", r"^(Hummingbird\w*\.|HTTPTypes\.|ParleyGateway\.(Gateway|Routes?\w*|ClientInput|Authenticat\w*|RateLimit\w*|RequestContext\w*|ParleyRequestContext)\b|ParleyAuth\w*\.)"),
    ("cluster calls and placement", r"^(ParleyCluster\.|ParleyTransport\.(?!EventLoopTaskExecutor))"),
    ("conversation actor: order, idempotency", r"^ParleyChat\.(ConversationActor|ConversationState|SendMessage|SendResult)\b"),
    ("event encoding (JSON, SSE)", r"^(ParleyModel\.(DirectJSON|API|ServerSentEvent)\b|Foundation\w*\.JSON\w*|ParleyGateway\.(ServerSentEvent|EventJSON)\w*)"),
    ("delivery: fan-out, inboxes, streams", r"^(ParleyChat\.(ConversationFanOut|Deliver\w*|Inbox\w*|Courier\w*|StreamSession\w*|EventStream\w*|LiveEventStream|MemberGateways|ChatEvent|DirectoryCache\w*|UserActor|UserState)\b|ParleyGateway\.(StreamHub|LiveEventStream|EventStream\w*|Stream\w*)\b)"),
    ("presence", r"^ParleyChat\.Presence\w*\b"),
    ("push and webhooks planning", r"^Parley\w*\.(Push\w*|Webhook\w*)\b"),
    ("metrics and logs", r"^(Metrics\w*\.|Prometheus\w*\.|Logging\.|CoreMetrics\.|ParleyOps\w*\.)"),
    ("other Parley code", r"^Parley\w*\."),
    ("scheduling: tasks, executors, dispatch", r"^(swift_task_\w+|swift_job_run\w*|swift_continuation_\w+|swift_asyncLet\w*|swift::(runJobInEstablishedExecutorContext|AsyncTask::|TaskGroup|StackAllocator|runtime::SwiftTLSContext)|future_adapter|task_future_wait\w*|_dispatch_\w+|dispatch_\w+|_Concurrency\.|ParleyTransport\.EventLoopTaskExecutor\b)"),
]
COMPILED = [(name, re.compile(pattern)) for name, pattern in STAGES]
UNATTRIBUTED = "thread roots (no caller in the window)"

ALLOCATIONS = re.compile(r"^malloc$")
HOPS = re.compile(r"^(swift_task_switch|swift_task_enqueue|swift_task_enqueueGlobal|swift_continuation_resume|swift_continuation_throwingResume\w*|swift_task_create)$")
PARKS = re.compile(r"^(epoll_wait|epoll_pwait|pthread_cond_wait|pthread_cond_timedwait|pthread_cond_clockwait|__futex_abstimed_wait_common|__lll_lock_wait|_dispatch_futex_wait|sem_wait|sem_timedwait|nanosleep|clock_nanosleep)$")

WRAPPERS = re.compile(
    r"^(generic specialization <.*?> of |specialized |partial apply forwarder for |merged |"
    r"reabstraction thunk helper from .*? to |thunk for |"
    r"\(\d+\) (suspend|await) resume partial function for |(await |suspend )?resume partial function for |"
    r"(implicit )?closure #\d+ (\(.*?\) )?in |protocol witness for |dispatch thunk of |"
    r"(static )?(async )?function signature specialization <.*?> of |(one-shot )?lazy (global )?.*? of |"
    r"outlined .*? of |@objc |default argument \d+ of |variable initialization expression of |"
    r"(key path )?(getter|setter) (of|for) )"
)
# Value witnesses and outlined copies belong to whoever copies the value.
NOT_AN_ENTRY = re.compile(r"^(outlined |initializeWithCopy|initializeWithTake|assignWithCopy|assignWithTake|destroy for|value witness|type metadata|storeEnumTagSinglePayload|getEnumTagSinglePayload|__swift_|swift_retain|swift_release|swift_bridgeObject|swift_allocObject|swift_deallocObject|swift_getGenericMetadata|swift_dynamicCast)")


def parse(path):
    """Self cost per function and, per call edge, calls and inclusive cost."""
    self_cost = collections.Counter()
    edges = collections.defaultdict(lambda: [0, 0])
    tables = {"fn": {}}
    function = callee = None
    calls = None

    def name(text):
        match = re.match(r"\((\d+)\)(?: (.*))?$", text)
        if not match:
            return text
        if match.group(2) is not None:
            tables["fn"][match.group(1)] = match.group(2)
        return tables["fn"][match.group(1)]

    with open(path) as lines:
        for line in lines:
            if line.startswith("fn="):
                function = name(line[3:].rstrip("\n"))
            elif line.startswith("cfn="):
                callee = name(line[4:].rstrip("\n"))
            elif line.startswith("calls="):
                calls = int(line[6:].split()[0])
            elif line[:1].isdigit() or line[:1] in "+-*":
                parts = line.split()
                cost = int(parts[1]) if len(parts) > 1 else 0
                if calls is not None:
                    edge = edges[(function, callee)]
                    edge[0] += calls
                    edge[1] += cost
                    calls = None
                else:
                    self_cost[function] += cost
    return self_cost, edges


def demangled(names):
    """Each name (callgrind marks recursion levels with 'N) → swift demangle's qualified form."""
    plain = [re.sub(r"'\d+$", "", n) for n in names]
    out = subprocess.run(["swift", "demangle"], input="\n".join(plain), capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.split("\n")))


def stage_of(qualified):
    if NOT_AN_ENTRY.match(qualified):
        return None
    core = qualified
    for _ in range(8):
        stripped = WRAPPERS.sub("", core, count=1)
        if stripped == core:
            break
        core = stripped
    if NOT_AN_ENTRY.match(core):
        return None
    for stage, pattern in COMPILED:
        if pattern.search(core):
            return stage
    return None


def attribute(self_cost, edges, names):
    """Each function's shares of the stages: its own if a pattern names it, else its callers'."""
    callers = collections.defaultdict(list)
    for (caller, callee), (_, inclusive) in edges.items():
        if caller != callee:
            callers[callee].append((caller, inclusive))
    functions = set(self_cost) | {c for edge in edges for c in edge}
    entry = {f: stage_of(names[f]) for f in functions}
    share = {}
    for f in functions:
        share[f] = {entry[f]: 1.0} if entry[f] else {UNATTRIBUTED: 1.0}
    pending = [f for f in functions if not entry[f] and callers[f]]
    # Gauss-Seidel rounds: call graphs have cycles (recursion, async resumption); 60 rounds settle
    # them to well under a thousandth of the total.
    for _ in range(60):
        for f in pending:
            total = sum(w for _, w in callers[f])
            mixed = collections.Counter()
            for caller, weight in callers[f]:
                w = weight / total if total else 1 / len(callers[f])
                for stage, part in share[caller].items():
                    mixed[stage] += part * w
            share[f] = dict(mixed)
    return share


def count(directory):
    files = [f for f in glob.glob(os.path.join(directory, "callgrind.out.*")) if re.search(r"\.\d+\.\d+$", f)]
    if not files:
        sys.exit(f"no callgrind dump in {directory}")
    messages = int(open(os.path.join(directory, "messages.txt")).read().split()[0])
    if messages <= 0:
        sys.exit(f"no message was committed in the window ({directory}/load.txt)")
    self_cost, edges = parse(max(files, key=os.path.getsize))
    names = demangled(sorted(set(self_cost) | {c for edge in edges for c in edge}))
    share = attribute(self_cost, edges, names)
    rows = collections.defaultdict(lambda: collections.Counter())
    heaviest = collections.defaultdict(collections.Counter)
    for f, cost in self_cost.items():
        for stage, part in share[f].items():
            rows[stage]["instructions"] += cost * part
            heaviest[stage][names[f]] += cost * part
    for (caller, callee), (calls, _) in edges.items():
        target = re.sub(r"'\d+$", "", callee)
        kind = "allocations" if ALLOCATIONS.match(target) else "hops" if HOPS.match(target) else "parks" if PARKS.match(target) else None
        if kind:
            for stage, part in share[caller].items():
                rows[stage][kind] += calls * part
    report = json.load(open(os.path.join(directory, "load.json")))
    fanout = report["deliveries"] / max(report["acknowledged"], 1)
    return messages, fanout, rows, heaviest


def table(messages, fanout, rows):
    order = [name for name, _ in STAGES] + [UNATTRIBUTED]
    total = collections.Counter()
    for row in rows.values():
        total.update(row)
    lines = [f"{messages} messages in the window, {fanout:.2f} stream writes each (the load's deliveries per message); per message:",
             f"{'stage':44} {'instructions':>13} {'share':>6} {'mallocs':>8} {'hops':>6} {'parks':>6}"]
    for stage in sorted(order, key=lambda s: -rows.get(s, {}).get("instructions", 0)):
        row = rows.get(stage)
        if not row or row["instructions"] < 0.0005 * total["instructions"]:
            continue
        lines.append(f"{stage:44} {row['instructions'] / messages:13,.0f} {100 * row['instructions'] / total['instructions']:5.1f}% "
                     f"{row['allocations'] / messages:8.1f} {row['hops'] / messages:6.1f} {row['parks'] / messages:6.2f}")
    lines.append(f"{'all':44} {total['instructions'] / messages:13,.0f} {100.0:5.1f}% "
                 f"{total['allocations'] / messages:8.1f} {total['hops'] / messages:6.1f} {total['parks'] / messages:6.2f}")
    return lines


def main():
    if sys.argv[1] == "--compare":
        (bm, bfan, brows, _), (m, fan, rows, _) = count(sys.argv[2]), count(sys.argv[3])
        base, this = table(bm, bfan, brows), table(m, fan, rows)
        print("baseline:")
        print("\n".join(base))
        print("this build:")
        print("\n".join(this))
        bt = sum(r["instructions"] for r in brows.values()) / bm
        t = sum(r["instructions"] for r in rows.values()) / m
        print(f"instructions per message: {t:,.0f} against {bt:,.0f} (ratio {t / bt:.2f})")
        return
    directory = sys.argv[1]
    messages, fanout, rows, heaviest = count(directory)
    print("\n".join(table(messages, fanout, rows)))
    with open(os.path.join(directory, "heaviest.txt"), "w") as out:
        for stage, functions in sorted(heaviest.items(), key=lambda kv: -sum(kv[1].values())):
            out.write(f"{stage}: {sum(functions.values()) / messages:,.0f} per message\n")
            for function, cost in functions.most_common(15):
                out.write(f"  {cost / messages:10,.0f}  {function[:200]}\n")


if __name__ == "__main__":
    main()
