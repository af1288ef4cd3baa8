"""The campaign's cost as its README states it, from results.jsonl alone: `python experiments/cpu-claims/cost.py`.

Every seed of one configuration runs the same arithmetic, so its fastest run is its speed alone on the machine;
a run far below that shared the cores with other jobs. "Alone" re-times each run at its configuration's fastest
tokens/s (its time outside the measured steps too, scaled alike)."""

import json
from collections import defaultdict
from pathlib import Path

SLOWED = 0.6  # a run below this fraction of its configuration's fastest tokens/s counts as slowed by other load

rows = [json.loads(line) for line in (Path(__file__).parent / "results.jsonl").read_text().splitlines()]
print(f"{len(rows)} runs; training wall time {sum(r['wall_time_s'] or 0 for r in rows):,.0f} s "
      f"({sum(r['wall_time_s'] or 0 for r in rows) / 3600:.1f} h)")
timed = [r for r in rows if (r.get("throughput") or {}).get("tokens_per_s")]  # a run resumed only to validate: none


def configuration(r: dict) -> str:
    return r["run_name"].rsplit("-s", 1)[0].replace("-tuning=True", "")


fastest: dict[str, float] = defaultdict(float)
for r in timed:
    fastest[configuration(r)] = max(fastest[configuration(r)], r["throughput"]["tokens_per_s"])
slowed = [r for r in timed if r["throughput"]["tokens_per_s"] < SLOWED * fastest[configuration(r)]]
alone = sum(r["tokens"] / fastest[configuration(r)]
            + (r["wall_time_s"] - r["throughput"]["measured_seconds"])
            * r["throughput"]["tokens_per_s"] / fastest[configuration(r)] for r in timed)
print(f"{len(slowed)} runs below {SLOWED:.0%} of their configuration's fastest tokens/s "
      f"(slowest {min(r['throughput']['tokens_per_s'] for r in slowed):,.0f} tokens/s)")
print(f"alone, at each configuration's fastest speed: {alone / 3600:.1f} h")
