#!/usr/bin/env python3
"""Plots a `parley-load ramp` report: delivery latency percentiles per offered rate (log scale).

    plot-ramp.py ramp.json ramp.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

report = json.load(open(sys.argv[1]))
steps = report["steps"]
rates = [s["offeredRate"] for s in steps]
fig, ax = plt.subplots(figsize=(8, 5))
for key, label in [("p50", "p50"), ("p99", "p99"), ("p999", "p99.9")]:
    ax.plot(rates, [s["delivery"][key] / 1000 for s in steps], marker="o", label=f"delivery {label}")
ax.plot(rates, [s["ack"]["p99"] / 1000 for s in steps], marker="x", linestyle="--", label="acknowledgement p99")
ax.axhline(50, color="grey", linewidth=0.8, linestyle=":")
ax.set_yscale("log")
ax.set_xlabel("offered rate (messages/s)")
ax.set_ylabel("latency from the scheduled send (ms)")
held = report.get("highestRateHeld")
ax.set_title("Parley: delivery latency by offered rate" + (f" — held {held:.0f} msg/s" if held else ""))
ax.grid(True, which="both", alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=120)
