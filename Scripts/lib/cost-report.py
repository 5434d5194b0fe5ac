"""One rate's report for Scripts/bench-cost: the `perf stat` counts of every node over the window,
per message sent, and parley-load's figures for the run.

    python3 Scripts/lib/cost-report.py OUT RATE WINDOW_SECONDS "NODE…" PROFILE(0|1)
"""
import json
import os
import sys

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

report_path = os.path.join(out, f"load-{rate}.json")
if os.path.exists(report_path):
    report = json.load(open(report_path))
    delivery = report.get("delivery", {})
    print(f"  parley-load over its whole run: achieved {report.get('achievedRate', 0):.0f} msg/s; server CPU per delivery to a member other than the sender "
          f"{report.get('serverCPUMicrosPerRecipientDelivery', 0):.0f} µs; delivery p50 {delivery.get('p50', 0) / 1000:.1f} ms, p99 {delivery.get('p99', 0) / 1000:.1f} ms; "
          f"load generator {report.get('loadGeneratorCores', 0):.2f} cores; verified {report.get('verified')}")

if profile:
    groups = [("kernel", ("[kernel",)), ("BoringSSL", ("libssl", "libcrypto", "boringssl")), ("SQLite", ("sqlite",)),
              ("Swift runtime", ("libswiftCore", "libswift_Concurrency", "libFoundation", "libdispatch")), ("libc", ("libc.so", "libm.so", "ld-linux"))]
    print("  where each node's CPU went (perf samples by library; the node's binary is NIO, Parley and statically linked code):")
    for node in nodes:
        path = os.path.join(out, f"dso-{rate}-{node}.txt")
        if not os.path.exists(path):
            continue
        shares = {}
        for line in open(path):
            line = line.strip()
            if not line or line.startswith("#") or "%" not in line:
                continue
            percent, _, dso = line.partition("%")
            try:
                value = float(percent)
            except ValueError:
                continue
            dso = dso.strip()
            group = next((name for name, keys in groups if any(k in dso for k in keys)), "node binary" if "parley-node" in dso else "other")
            shares[group] = shares.get(group, 0) + value
        print(f"    {node:<10} " + ", ".join(f"{name} {value:.0f} %" for name, value in sorted(shares.items(), key=lambda item: -item[1])))
