"""The robust campaign's cost per arm, from results.jsonl alone: `python experiments/cpu-robust/cost.py`.

Each run is put in the arm of conf/experiment/cpu_robust.yaml that made it (by its config: the arms differ in what
they vary). A run's wall time counts once even when it ran beside another (two joblib jobs): the arm's "elapsed" is
the union of its runs' [start, end] intervals, the wall-clock time the arm took on the machine."""

import json
import math
from collections import defaultdict
from datetime import datetime
from pathlib import Path

ARMS = ("1 headline", "2 fan_in init", "3 length 4x", "4 other claims", "5 neighbours at 1x",
        "6 C8 and C7 under fan_in", "7 length 4x under fan_in", "8 C1 under fan_in", "9 tiny (d_model 128)",
        "qk-norm + z-loss (cpu_robust_more)", "10 depth at matched tokens", "11 every claim at 4x under fan_in",
        "12 init gain 0.55", "13 power at d_model 128", "14 init gain 0.32", "15 C1 at 4x under fan_in")


def new_arm(r: dict) -> str | None:
    """Arms 10-15 (the practice-matched map), by what only their runs have; None for a run of arms 1-9."""
    cfg = r["config"]
    m, t, f = cfg["model"], cfg["trainer"], cfg["ffn"]
    tuning = bool(cfg.get("tuning"))
    flagged = bool((cfg.get("lr_protocol") or {}).get("judge_neighbours")) and not tuning
    if m.get("init") == "scaled":
        return ARMS[12] if m.get("init_gain") == 0.55 else ARMS[14]
    if t.get("tokens_per_param") == 12:
        return ARMS[10]
    if m.get("name") == "tiny":
        seed, lr = r["seed"], cfg["optim"]["lr"]
        new = (not tuning and seed >= 4) or lr in (0.00141, 0.001) or (tuning and lr == 0.002 and f["act"] == "relu") \
            or (flagged and f["act"] != "relu")
        return ARMS[13] if new else None
    if t.get("tokens_per_param") == 24 and m.get("init") == "fan_in":
        if m.get("non_embedding_params") or f.get("width"):
            return ARMS[15]
        arm7 = f["act"] in ("relu", "gelu", "swiglu") and not f.get("bias") and m.get("n_layer") == 4 \
            and not flagged and (tuning or r["seed"] < 4)
        return None if arm7 else ARMS[11]
    return None


def arm(r: dict) -> str:
    """The arm of conf/experiment/cpu_robust.yaml that made the run, from its config. A judged run with
    lr_protocol.judge_neighbours in a 1× setting arms 1, 2 and 4 ran is a neighbour (arm 5): their runs at the chosen
    lrs were made before the flag existed."""
    if (new := new_arm(r)) is not None:
        return new
    cfg = r["config"]
    m, t, o, f = cfg["model"], cfg["trainer"], cfg["optim"], cfg["ffn"]
    fan_in, tuning = m.get("init") == "fan_in", bool(cfg.get("tuning"))
    flagged = bool((cfg.get("lr_protocol") or {}).get("judge_neighbours")) and not tuning
    if m.get("qk_norm") or o.get("z_loss"):
        return ARMS[9]
    if m.get("name") == "tiny":
        return ARMS[8]
    if (t.get("tokens_per_param") or 0) > 6:
        return ARMS[6] if fan_in else ARMS[2]
    if m.get("non_embedding_params") or f.get("width"):
        return ARMS[7] if fan_in else ARMS[3]
    if m.get("n_layer") == 2:  # arm 6 brought arm 4's gpt2 2-layer grid to 7 lrs x 3 seeds, 6 judged seeds
        new = flagged or (tuning and (r["seed"] == 102 or o["lr"] in (0.002, 0.016))) or (not tuning and r["seed"] == 5)
        return ARMS[5] if fan_in or new else ARMS[3]
    if f.get("bias"):
        return ARMS[5] if fan_in else ARMS[4] if flagged else ARMS[3]
    if f.get("act") == "swish" and fan_in:
        return ARMS[5]
    if flagged:
        return ARMS[4]
    return ARMS[1] if fan_in else ARMS[0]


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
