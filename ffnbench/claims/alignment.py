"""C9: rounding d_ff to a multiple of 64 makes the FFN faster on tensor cores (docs/claims.md §C9), judged on
the alignment benchmark files `make bench` writes (one SwiGLU layer at d_ff 682, unaligned, and at the aligned
640, 704 and 768)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from ffnbench.claims.claim import Evidence, Observations
from ffnbench.stats.multiplicity import combine
from ffnbench.stats.verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Verdict

REPO = Path(__file__).resolve().parents[2]
BENCH_GLOB = "experiments/bench/*/alignment.json"
ALIGNMENT = 64  # the smallest alignment the claim names; a multiple of 128 or 256 is one of 64 too


def find_bench_files(roots: Iterable[Path] = (REPO, Path.cwd())) -> tuple[Path, ...]:
    """Every alignment benchmark under the repository and the working directory, once each."""
    found = {p.resolve() for root in roots for p in Path(root).glob(BENCH_GLOB)}
    return tuple(sorted(found))


def _time_band(row: dict) -> tuple[float, float]:
    """The row's time as median ± half its interquartile range over the benchmark's repetitions: its noise."""
    ms, iqr = float(row["ms_median"]), float(row["ms_iqr"])
    return ms - iqr / 2, ms + iqr / 2


def _per_param_band(row: dict) -> tuple[float, float]:
    """The same band per parameter (ns per parameter)."""
    low, high = _time_band(row)
    return low * 1e6 / int(row["params"]), high * 1e6 / int(row["params"])


def alignment_rows(data: dict) -> list[str]:
    """An alignment.json's timings as markdown table lines."""
    lines = ["| d_ff | multiple of | median ms | IQR ms | params | ns/param |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['d_ff']} | {r.get('multiple_of')} | {r['ms_median']:.4g} | {r['ms_iqr']:.3g} | {r['params']:,} "
              f"| {r['ns_per_param']:.4g} |" for r in data["rows"]]
    return lines


def _compare(name: str, a: tuple[float, float], b: tuple[float, float], unit: str) -> Verdict:
    """"a is no worse than b" on two noise bands: supported if a's band lies wholly at or below b's, contradicted
    if it lies wholly above it, inconclusive when they overlap."""
    text = f"{name}: [{a[0]:.4g}, {a[1]:.4g}] vs [{b[0]:.4g}, {b[1]:.4g}] {unit}"
    if a[1] <= b[0]:
        return Verdict(SUPPORTED, f"{text}, no more beyond the spread")
    if a[0] > b[1]:
        return Verdict(CONTRADICTED, f"{text}, more beyond the spread")
    return Verdict(INCONCLUSIVE, f"{text}: the spreads overlap")


def alignment_parts(rows: list[dict]) -> list[tuple[str, Verdict]]:
    """C9's two tests on one GPU's rows, around the unaligned d_ff (682): the next aligned size up (704) must take
    no more absolute time although it is larger, and the next aligned size down (640) must cost no more per
    parameter although it is smaller (bigger GEMMs are cheaper per parameter, aligned or not, so only these two
    directions separate alignment from size). Noise: each row's median ± IQR/2 over the repetitions."""
    unaligned = [r for r in rows if int(r["d_ff"]) % ALIGNMENT]
    if len(unaligned) != 1:
        return [("rows", Verdict(INCONCLUSIVE, f"needs exactly one unaligned d_ff, found {len(unaligned)}"))]
    u = unaligned[0]
    aligned = [r for r in rows if not int(r["d_ff"]) % ALIGNMENT]
    above = min((r for r in aligned if r["d_ff"] > u["d_ff"]), key=lambda r: r["d_ff"], default=None)
    below = max((r for r in aligned if r["d_ff"] < u["d_ff"]), key=lambda r: r["d_ff"], default=None)
    parts = []
    if above is None:
        parts.append(("time above", Verdict(INCONCLUSIVE, f"no aligned d_ff above {u['d_ff']}: rerun `make bench`")))
    else:
        parts.append((f"time: {above['d_ff']} no slower than {u['d_ff']}",
                      _compare(f"ms at {above['d_ff']} vs {u['d_ff']}", _time_band(above), _time_band(u), "ms")))
    if below is None:
        parts.append(("cost per parameter below", Verdict(
            INCONCLUSIVE, f"no aligned d_ff below {u['d_ff']} to compare per parameter: rerun `make bench` (it "
                          "times 640)")))
    else:
        parts.append((f"cost per parameter: {below['d_ff']} no dearer than {u['d_ff']}",
                      _compare(f"ns/param at {below['d_ff']} vs {u['d_ff']}", _per_param_band(below),
                               _per_param_band(u), "ns/param")))
    return parts


def c9(obs: Observations) -> Evidence:
    ev = Evidence()
    cpu_only, readable = True, 0
    for path in obs.bench_files:
        try:
            data = json.loads(Path(path).read_text())
            machine = data["machine"]
            table = alignment_rows(data)
            gpu = machine.get("accelerator") == "gpu"
            parts = alignment_parts(data["rows"]) if gpu else []
        except (OSError, ValueError, KeyError, TypeError) as e:
            ev.details.append(f"- {path}: unreadable ({type(e).__name__}: {e})")
            continue
        readable += 1
        label = machine.get("gpu") or machine.get("cpu") or machine.get("label") or str(path.parent.name)
        ev.details += [f"\n{'GPU' if gpu else 'CPU'}: {label} (torch {machine.get('torch')}; {path.parent.name}):\n",
                       *table, ""]
        if gpu:
            cpu_only = False
            ev.parts += [(f"{label}, {name}", v) for name, v in parts]
            ev.effect += f"{'; ' if ev.effect else ''}{label}: {combine(parts).reason}"
    if not obs.bench_files:
        ev.parts.append(("benchmark", Verdict(INCONCLUSIVE, f"no {BENCH_GLOB}: run `make bench`")))
        ev.effect = "n/a: not benchmarked (`make bench`)"
    elif not readable:
        ev.parts.append(("benchmark", Verdict(INCONCLUSIVE, "no readable alignment.json: rerun `make bench`")))
        ev.effect = "n/a: no readable benchmark (`make bench`)"
    elif cpu_only:
        ev.parts.append(("benchmark", Verdict(INCONCLUSIVE, "no tensor cores on this machine: CPU timings only "
                                                            "(run `make bench` on a GPU)")))
        ev.effect = "n/a: CPU timings only, no tensor cores (shown below)"
    return ev
