#!/usr/bin/env python3
"""Summarises the parley-load reports of Scripts/bench-compare (run-PAIR-A.json, run-PAIR-B.json).

    compare-runs.py DIR --pair N   one line per run of pair N
    compare-runs.py DIR            per build: medians; pair by pair: B's server CPU per delivery against A's

Cores are read from each report's nodeCores by operations port: 17701-17703 the workers, 17704
the gateway.
"""
import json
import pathlib
import re
import statistics
import sys

directory = pathlib.Path(sys.argv[1])
only_pair = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[2] == "--pair" else None


def load(pair, build):
    path = directory / f"run-{pair}-{build}.json"
    if not path.exists():
        return None
    report = json.loads(path.read_text())
    cores = report.get("nodeCores") or {}
    gateway = sum(v for k, v in cores.items() if k.endswith(":17704"))
    workers = sum(v for k, v in cores.items() if not k.endswith(":17704"))
    return {
        "cpu": report.get("serverCPUMicrosPerDelivery"),
        "p50": report["delivery"]["p50"] / 1000,
        "p99": report["delivery"]["p99"] / 1000,
        "gateway": gateway,
        "workers": workers,
        "load": report["loadGeneratorCores"],
        "verified": report["verified"],
        "rate": report["achievedRate"],
    }


def line(build, run):
    if run is None:
        return f"  {build}: no report"
    cpu = f"{run['cpu']:.0f} µs" if run["cpu"] is not None else "-"
    verdict = "verified" if run["verified"] else "NOT VERIFIED"
    return (f"  {build}: {run['rate']:.0f} acked/s  server CPU/delivery {cpu:>7}  delivery p50 {run['p50']:.1f} ms  "
            f"p99 {run['p99']:.1f} ms  cores: gateway {run['gateway']:.2f}  workers {run['workers']:.2f}  load {run['load']:.2f}  {verdict}")


pairs = sorted({int(m.group(1)) for p in directory.glob("run-*-*.json") if (m := re.match(r"run-(\d+)-[AB]\.json", p.name))})
if only_pair is not None:
    print(f"pair {only_pair}")
    for build in "AB":
        print(line(build, load(only_pair, build)))
    sys.exit(0)

runs = {build: [r for r in (load(p, build) for p in pairs) if r is not None] for build in "AB"}
print(f"\nmedians over {len(pairs)} pairs")
for build in "AB":
    rs = [r for r in runs[build] if r["cpu"] is not None]
    if not rs:
        print(f"  {build}: no complete run")
        continue
    median = {key: statistics.median(r[key] for r in rs) for key in ("cpu", "p50", "p99", "gateway", "workers", "load")}
    failed = sum(1 for r in runs[build] if not r["verified"])
    print(f"  {build}: server CPU/delivery {median['cpu']:.0f} µs  delivery p50 {median['p50']:.1f} ms  p99 {median['p99']:.1f} ms  "
          f"cores: gateway {median['gateway']:.2f}  workers {median['workers']:.2f}  load {median['load']:.2f}"
          + (f"  ({failed} run(s) not verified)" if failed else ""))
ratios = []
for pair in pairs:
    a, b = load(pair, "A"), load(pair, "B")
    if a and b and a["cpu"] and b["cpu"]:
        ratios.append(b["cpu"] / a["cpu"])
if ratios:
    lower = sum(1 for r in ratios if r < 1)
    print(f"B's server CPU per delivery against A's, pair by pair: "
          + "  ".join(f"{(r - 1) * 100:+.0f} %" for r in ratios)
          + f"  (median {(statistics.median(ratios) - 1) * 100:+.0f} %; B lower in {lower} of {len(ratios)})")
