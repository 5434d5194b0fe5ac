"""One rate's report for Scripts/bench-cost: the `perf stat` counts of every node over the window,
per message sent, and parley-load's figures for the run (also kept as summary-RATE.json beside
them). With --compare, every pair of a baseline's and this build's runs side by side.

    python3 Scripts/lib/cost-report.py DIR RATE WINDOW_SECONDS "NODE…" PROFILE(0|1)
    python3 Scripts/lib/cost-report.py --compare OUT "RATE,…" PAIRS
"""
import json
import os
import re
import statistics
import sys


def compare(out, rates, pairs):
    """Each pair's figures for the baseline and this build, then the median of their ratios."""
    def summary(name, pair, rate):
        path = os.path.join(out, f"{name}-{pair}", f"summary-{rate}.json")
        return json.load(open(path)) if os.path.exists(path) else None

    def idle(name, pair):
        path = os.path.join(out, f"{name}-{pair}", "idle.txt")
        found = re.search(r"([0-9.]+) KiB per stream", open(path).read()) if os.path.exists(path) else None
        return float(found.group(1)) if found else None

    print("\nbaseline against this build, pair by pair (this build / baseline):")
    figures = [("CPU µs", "server CPU µs per message"), ("syscalls", "system calls per message"), ("ctx switches", "context switches per message")]
    for rate in rates:
        for key, label in figures:
            ratios, cells = [], []
            for pair in range(1, pairs + 1):
                a, b = summary("baseline", pair, rate), summary("build", pair, rate)
                if not a or not b or not a["all"].get(key):
                    cells.append("—")
                    continue
                ratio = b["all"][key] / a["all"][key]
                ratios.append(ratio)
                cells.append(f"{a['all'][key]:.1f} → {b['all'][key]:.1f} ({ratio:.2f})")
            median = f"median {statistics.median(ratios):.2f}" if ratios else "no pairs"
            print(f"  at {rate} msg/s, {label}: " + "; ".join(cells) + f"; {median}")
    cells, ratios = [], []
    for pair in range(1, pairs + 1):
        a, b = idle("baseline", pair), idle("build", pair)
        if a is None or b is None:
            continue
        ratios.append(b / a)
        cells.append(f"{a:.1f} → {b:.1f} ({b / a:.2f})")
    if cells:
        print(f"  idle, gateway KiB per stream: " + "; ".join(cells) + f"; median {statistics.median(ratios):.2f}")


if sys.argv[1] == "--compare":
    compare(sys.argv[2], [int(r) for r in sys.argv[3].split(",")], int(sys.argv[4]))
    sys.exit(0)

out, rate, window, nodes, profile = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4].split(), sys.argv[5] == "1"
messages = rate * window

# Columns: what each adds up, per message.
COLUMNS = [
    ("CPU µs", lambda c: c.get("task-clock", 0) * 1000),  # task-clock is in ms
    ("syscalls", lambda c: c.get("raw_syscalls:sys_enter", 0)),
    ("sock writes", lambda c: sum(c.get(f"syscalls:sys_enter_{k}", 0) for k in ("write", "writev", "sendmsg"))),
    ("sock reads", lambda c: sum(c.get(f"syscalls:sys_enter_{k}", 0) for k in ("read", "readv", "recvmsg"))),
    ("epoll_wait", lambda c: c.get("syscalls:sys_enter_epoll_wait", 0)),
    ("futex", lambda c: c.get("syscalls:sys_enter_futex", 0)),
    ("fsync", lambda c: c.get("syscalls:sys_enter_fsync", 0) + c.get("syscalls:sys_enter_fdatasync", 0)),
    ("pread", lambda c: c.get("syscalls:sys_enter_pread64", 0)),
    ("pwrite", lambda c: c.get("syscalls:sys_enter_pwrite64", 0)),
    ("ctx switches", lambda c: c.get("context-switches", 0)),
    ("mallocs", lambda c: c.get("probe_libc:malloc")),
    ("TLS sealed", lambda c: c.get("probe_parley:tls_seal")),
]


def counts(node):
    found = {}
    path = os.path.join(out, f"stat-{rate}-{node}.csv")
    if not os.path.exists(path):
        return found
    for line in open(path):
        parts = line.strip().split(",")
        if len(parts) < 3 or line.startswith("#"):
            continue
        try:
            found[parts[2]] = float(parts[0])
        except ValueError:
            pass  # <not counted> / <not supported>
    return found


rows = {node: counts(node) for node in nodes}
columns = [(name, value) for name, value in COLUMNS if any(value(c) is not None for c in rows.values())]
print(f"\nat {rate} msg/s, per message sent (one recipient delivery each), over {window:.0f} s = {messages:,.0f} messages:")
print(f"  {'node':<10}" + "".join(f"{name:>13}" for name, _ in columns))
total = {name: 0.0 for name, _ in columns}
for node in nodes:
    cells = []
    for name, value in columns:
        amount = (value(rows[node]) or 0) / messages
        total[name] += amount
        cells.append(f"{amount:>13.1f}" if name == "CPU µs" else f"{amount:>13.2f}")
    print(f"  {node:<10}" + "".join(cells))
print(f"  {'all':<10}" + "".join(f"{total[name]:>13.1f}" if name == "CPU µs" else f"{total[name]:>13.2f}" for name, _ in columns))
with open(os.path.join(out, f"summary-{rate}.json"), "w") as summary:
    json.dump({"all": total, "nodes": {node: {name: (value(rows[node]) or 0) / messages for name, value in columns} for node in nodes}}, summary)


def commit_batches(node):
    """The messages per commit of `node`'s group committer over the run, and its commits; None
    where its metrics were not read or it committed nothing (a gateway of its own)."""
    path = os.path.join(out, f"metrics-{rate}-{node}.txt")
    if not os.path.exists(path):
        return None
    found = {}
    for line in open(path):
        name, _, value = line.strip().partition(" ")
        if name in ("parley_store_commit_batch_size_sum", "parley_store_commit_batch_size_count"):
            found[name.rsplit("_", 1)[1]] = float(value)
    return (found["sum"] / found["count"], found["count"]) if found.get("count") else None


batches = {node: commit_batches(node) for node in nodes}
if any(batches.values()):
    print("  messages per commit over the run (registration and set-up included): "
          + ", ".join(f"{node} {b[0]:.1f} ({b[1]:,.0f} commits)" for node, b in batches.items() if b))

report_path = os.path.join(out, f"load-{rate}.json")
if os.path.exists(report_path):
    report = json.load(open(report_path))
    delivery = report.get("delivery", {})
    print(f"  parley-load over its whole run: achieved {report.get('achievedRate', 0):.0f} msg/s; server CPU per delivery to a member other than the sender "
          f"{report.get('serverCPUMicrosPerRecipientDelivery', 0):.0f} µs; delivery p50 {delivery.get('p50', 0) / 1000:.1f} ms, p99 {delivery.get('p99', 0) / 1000:.1f} ms; "
          f"load generator {report.get('loadGeneratorCores', 0):.2f} cores; verified {report.get('verified')}")

# Each sampled function goes to the first kind whose test it passes.
KINDS = [
    ("kernel", lambda dso, sym: dso.startswith("[kernel")),
    # BoringSSL is linked into the node binary; its C functions keep their own names.
    ("TLS", lambda dso, sym: "BoringSSL" in sym or "boringssl" in dso
        or sym.startswith(("aead_", "aes", "gcm", "sha", "ssl_", "SSL_", "tls", "bssl", "x25519", "chacha", "ChaCha", "bn_", "ec_", "EVP_", "CRYPTO_", "BIO_", "ERR_", "OPENSSL_"))),
    ("SQLite", lambda dso, sym: "sqlite" in dso.lower() or sym.startswith("sqlite3")),
    ("refcounting", lambda dso, sym: sym.startswith(("swift_retain", "swift_release", "swift_bridgeObjectRe", "swift_unknownObjectRe")) or "RefCounts" in sym or sym == "swift_isUniquelyReferenced_nonNull_native"),
    ("allocation", lambda dso, sym: sym.split("@")[0] in ("malloc", "_int_malloc", "free", "cfree", "_int_free", "unlink_chunk.constprop.0", "malloc_consolidate", "realloc", "_int_realloc", "posix_memalign", "_mid_memalign", "tcache_init")
        or sym.startswith(("swift_allocObject", "swift_deallocObject", "swift_slowAlloc", "swift_slowDealloc", "swift_task_alloc", "swift_task_dealloc", "_swift_release_dealloc")) or "StackAllocator" in sym),
    ("Swift metadata, casts, exclusivity", lambda dso, sym: any(k in sym for k in ("Metadata", "getCache", "ConcurrentReadableHashMap", "tryCast", "dynamicCast", "Conformance", "Witness", "instantiateConcreteType", "GenericRequirements", "GenericParameter", "swift_beginAccess", "swift_endAccess", "AccessSet", "__tls_get_addr"))),
    ("Swift concurrency", lambda dso, sym: "libswift_Concurrency" in dso or "dispatch" in dso),
    ("NIO and Hummingbird", lambda dso, sym: any(k in sym for k in ("NIOPosix", "NIOCore", "NIOHTTP", "NIOHPACK", "NIOSSL", "NIOConcurrencyHelpers", "NIOTLS", "NIOExtras", "Hummingbird"))),
    ("Parley", lambda dso, sym: "Parley" in sym),
    ("libc string and memory", lambda dso, sym: "libc.so" in dso),
]

if profile:
    print("  where each node's CPU went (perf samples, by the kind of function; the rest is the Swift")
    print("  standard library, Foundation and code inlined across modules):")
    for node in nodes:
        path = os.path.join(out, f"symbols-{rate}-{node}.txt")
        if not os.path.exists(path):
            continue
        shares = {}
        for line in open(path):
            parts = line.split(None, 3)
            if len(parts) < 4 or not parts[0].endswith("%"):
                continue
            try:
                value = float(parts[0].rstrip("%"))
            except ValueError:
                continue
            dso, sym = parts[1], parts[3].strip()
            kind = next((name for name, test in KINDS if test(dso, sym)), "rest")
            shares[kind] = shares.get(kind, 0) + value
        print(f"    {node:<10} " + ", ".join(f"{name} {value:.0f} %" for name, value in sorted(shares.items(), key=lambda item: -item[1]) if value >= 0.5))
