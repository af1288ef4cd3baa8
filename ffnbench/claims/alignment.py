"""C9: rounding d_ff to a multiple of 64 makes the FFN faster on tensor cores (docs/claims.md §C9), judged on
the alignment benchmark files `make bench` writes."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from ffnbench.claims.claim import Evidence, Observations
from ffnbench.stats import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Verdict

REPO = Path(__file__).resolve().parents[2]
BENCH_GLOB = "experiments/bench/*/alignment.json"
ALIGNMENT = 64  # the smallest alignment the claim names; a multiple of 128 or 256 is one of 64 too


def find_bench_files(roots: Iterable[Path] = (REPO, Path.cwd())) -> tuple[Path, ...]:
    """Every alignment benchmark under the repository and the working directory, once each."""
    found = {p.resolve() for root in roots for p in Path(root).glob(BENCH_GLOB)}
    return tuple(sorted(found))


def _band(row: dict) -> tuple[float, float]:
    """The cost per parameter ± half its interquartile range (scaled from the timing's IQR)."""
    ns, rel = float(row["ns_per_param"]), float(row["ms_iqr"]) / float(row["ms_median"])
    return ns * (1 - rel / 2), ns * (1 + rel / 2)


def alignment_rows(data: dict) -> list[str]:
    """An alignment.json's timings as markdown table lines."""
    lines = ["| d_ff | multiple of | median ms | IQR ms | params | ns/param |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['d_ff']} | {r.get('multiple_of')} | {r['ms_median']:.4g} | {r['ms_iqr']:.3g} | {r['params']:,} "
              f"| {r['ns_per_param']:.4g} |" for r in data["rows"]]
    return lines


def _alignment_verdict(rows: list[dict]) -> Verdict:
    """GPU: supported if every d_ff that is a multiple of 64 costs less per parameter than every unaligned
    d_ff beyond both IQR bands; contradicted if none does; inconclusive otherwise."""
    aligned = [r for r in rows if int(r["d_ff"]) % ALIGNMENT == 0]
    unaligned = [r for r in rows if int(r["d_ff"]) % ALIGNMENT != 0]
    if not aligned or not unaligned:
        return Verdict(INCONCLUSIVE, "needs both aligned and unaligned d_ff rows")
    wins = [a for a in aligned if all(_band(a)[1] < _band(u)[0] for u in unaligned)]
    text = f"{len(wins)} of {len(aligned)} aligned sizes cheaper per parameter than d_ff " + \
           ", ".join(str(u["d_ff"]) for u in unaligned) + " beyond the IQR bands"
    if len(wins) == len(aligned):
        return Verdict(SUPPORTED, text)
    return Verdict(CONTRADICTED if not wins else INCONCLUSIVE, text)


def c9(obs: Observations) -> Evidence:
    ev = Evidence()
    cpu_only = True
    for path in obs.bench_files:
        try:
            data = json.loads(Path(path).read_text())
            machine, rows = data["machine"], data["rows"]
            table = alignment_rows(data)
        except (OSError, ValueError, KeyError, TypeError) as e:
            ev.details.append(f"- {path}: unreadable ({type(e).__name__}: {e})")
            continue
        gpu = machine.get("accelerator") == "gpu"
        label = machine.get("gpu") or machine.get("cpu") or machine.get("label") or str(path.parent.name)
        ev.details += [f"\n{'GPU' if gpu else 'CPU'}: {label} (torch {machine.get('torch')}; {path.parent.name}):\n",
                       *table, ""]
        if gpu:
            cpu_only = False
            verdict = _alignment_verdict(rows)
            ev.parts.append((f"{label}", verdict))
            ev.effect += f"{'; ' if ev.effect else ''}{label}: {verdict.reason}"
    if not obs.bench_files:
        ev.parts.append(("benchmark", Verdict(INCONCLUSIVE, f"no {BENCH_GLOB}: run `make bench`")))
        ev.effect = "n/a: not benchmarked (`make bench`)"
    elif cpu_only:
        ev.parts.append(("benchmark", Verdict(INCONCLUSIVE, "no tensor cores on this machine: CPU timings only "
                                                            "(run `make bench` on a GPU)")))
        ev.effect = "n/a: CPU timings only, no tensor cores (shown below)"
    return ev
