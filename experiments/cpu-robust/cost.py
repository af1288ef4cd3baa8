"""The robust campaign's cost per arm, from results.jsonl alone: `python experiments/cpu-robust/cost.py`.

Each run is put in the arm of conf/experiment/cpu_robust.yaml that made it (by its config: the arms differ in what
they vary). A run's wall time counts once even when it ran beside another (two joblib jobs): the arm's "elapsed" is
the union of its runs' [start, end] intervals, the wall-clock time the arm took on the machine."""

import json
import math
from collections import defaultdict
from datetime import datetime
from pathlib import Path

ARMS = ("1 headline", "2 fan_in init", "3 length 4x", "4 other claims", "5 tiny", "6 qk-norm + z-loss")


def arm(r: dict) -> str:
    cfg = r["config"]
    m, t, o, f = cfg["model"], cfg["trainer"], cfg["optim"], cfg["ffn"]
    if m.get("qk_norm") or o.get("z_loss"):
        return ARMS[5]
    if m.get("name") == "tiny":
        return ARMS[4]
    if (t.get("tokens_per_param") or 0) > 6:
        return ARMS[2]
    if f.get("bias") or f.get("width") or m.get("non_embedding_params") or m.get("n_layer") == 2:
        return ARMS[3]
    return ARMS[1] if m.get("init") == "fan_in" else ARMS[0]


def interval(r: dict) -> tuple[float, float]:
    end = datetime.strptime(r["finished_at"], "%Y-%m-%dT%H:%M:%S%z").timestamp()
    return end - (r["wall_time_s"] or 0), end


def covered(spans: list[tuple[float, float]]) -> float:
    total, reach = 0.0, -math.inf
    for start, end in sorted(spans):
        total += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return total


rows = [json.loads(line) for line in (Path(__file__).parent / "results.jsonl").read_text().splitlines() if line]
by_arm: dict[str, list[dict]] = defaultdict(list)
for r in rows:
    by_arm[arm(r)].append(r)
print(f"{len(rows)} runs; training wall time {sum(r['wall_time_s'] or 0 for r in rows) / 3600:.2f} h summed over "
      f"runs, {covered([interval(r) for r in rows if r.get('finished_at')]) / 3600:.2f} h elapsed")
for name in ARMS:
    rs = by_arm.get(name, [])
    if not rs:
        print(f"  arm {name}: no run yet")
        continue
    tuning = sum(bool(r["config"].get("tuning")) for r in rs)
    elapsed = covered([interval(r) for r in rs if r.get("finished_at")])
    print(f"  arm {name}: {len(rs)} runs ({tuning} tuning, {len(rs) - tuning} judged), "
          f"{sum(r['wall_time_s'] or 0 for r in rs) / 3600:.2f} h summed, {elapsed / 3600:.2f} h elapsed")
