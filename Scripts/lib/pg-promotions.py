"""For each PostgreSQL fault of a chaos run that cost the leader (pg-leader, pg-leader-postgres,
pg-leader-cut): when a member was next promoted (its Patroni's "promoted self to leader"), and how
long after that the first send scheduled after the fault was acknowledged — the part of the write
outage that is Parley's and the new primary's (reconnecting, the synchronous standby attaching),
not Patroni's detection.

    python3 Scripts/lib/pg-promotions.py EVENTS TIMELINE PATRONI-LOG…
"""
import json
import re
import statistics
import sys
from datetime import datetime, timezone

events_path, timeline_path, logs = sys.argv[1], sys.argv[2], sys.argv[3:]
promotions = []
for path in logs:
    for line in open(path, errors="replace"):
        if "promoted self to leader" in line:
            stamp = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})", line)
            if stamp:
                at = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=timezone.utc)
                promotions.append(int(at.timestamp() * 1000))
promotions.sort()
scheduled = [json.loads(line) for line in open(timeline_path) if line.strip()]
after_promotion = {}
for line in open(events_path):
    t, action, member = line.split()
    t = int(t)
    if action not in ("pg-leader", "pg-leader-postgres", "pg-leader-cut"):
        continue
    promoted = next((p for p in promotions if p >= t), None)
    first = min((a["ackedMs"] for a in scheduled if a["scheduledMs"] >= t), default=None)
    if promoted is None or first is None:
        print(f"  {action} {member}: no promotion or no acknowledged send after it")
        continue
    after = (first - promoted) / 1000
    after_promotion.setdefault(action, []).append(after)
    print(f"  {action} {member}: a member promoted {(promoted - t) / 1000:.2f} s after the fault; the first send acknowledged {after:.2f} s after that")
for action, values in sorted(after_promotion.items()):
    print(f"  {action}: from the promotion to the first acknowledged send median {statistics.median(values):.2f} s, worst {max(values):.2f} s over {len(values)}")
