"""The d_ff alignment benchmark (claim C9): one SwiGLU layer at d_ff = 682 / 640 / 704 / 768 (a multiple of
1 / 128 / 64 / 256), its time and its time per parameter. The report reads alignment.json for C9.

Larger GEMMs are cheaper per parameter whether aligned or not, so comparing 682 only with larger aligned sizes
would favour the claim; 640 is the aligned size below it (C9 asks it to cost no more per parameter than 682) and
704 the one above (C9 asks it to take no more absolute time than 682)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ffnbench.bench.render import median_iqr, table
from ffnbench.bench.session import BenchSession
from ffnbench.bench.timing import LayerTrial, interleaved, load_snapshot, quartiles
from ffnbench.tables import fmt

NAME = "alignment"
TITLE = "d_ff alignment (claim C9)"
SUMMARY = ("one SwiGLU layer at d_ff = 682 / 640 / 704 / 768 (multiple of 1 / 128 / 64 / 256): time and time per "
           "parameter (claim C9)")

# SwiGLU at d_model 256: 2/3·4·256 = 682.7 truncated (unaligned), then aligned sizes below and above it. The
# unaligned row comes first: the printed table's last column is each row's ns/param relative to the first.
ALIGNMENT_ROWS = ((682, 1), (640, 128), (704, 64), (768, 256))
WARMUP_CALLS = 5


@dataclass(frozen=True)
class Sizes:
    """How much the alignment benchmark does."""

    d_model: int
    tokens: int  # tokens per call
    inner: int  # calls per timing
    reps: int


SIZES: Mapping[str, Sizes] = {
    "quick": Sizes(d_model=64, tokens=64, inner=2, reps=3),
    "gpu": Sizes(d_model=256, tokens=65536, inner=50, reps=15),
    "cpu": Sizes(d_model=256, tokens=2048, inner=4, reps=9),
}


def measure(session: BenchSession) -> dict[str, Any]:
    """The alignment record: settings, load, one row per (d_ff, multiple_of) of ALIGNMENT_ROWS, notes."""
    from ffnbench.model.ffn import FeedForward, FFNSpec, ffn_matmul_params

    s: Sizes = session.sizes[NAME]
    d = s.d_model
    load = {"before": load_snapshot()}
    trials, specs = {}, {}
    for d_ff, multiple_of in ALIGNMENT_ROWS:
        spec = FFNSpec(act="swiglu", width=d_ff / d, multiple_of=multiple_of)  # exactly d_ff (d_ff / d is exact)
        torch.manual_seed(0)
        ffn = FeedForward(d, spec)
        if ffn.size.d_ff != d_ff:
            raise RuntimeError(f"alignment benchmark: ffn.width={d_ff / d} gave d_ff={ffn.size.d_ff}, not {d_ff}")
        specs[d_ff] = (spec, ffn.size)
        trials[d_ff] = LayerTrial(session, ffn, s.tokens, d, s.inner)
    for trial in trials.values():
        trial.warm_up(WARMUP_CALLS)
    results = interleaved(trials, s.reps)
    load["after"] = load_snapshot()
    rows = []
    for d_ff, multiple_of in ALIGNMENT_ROWS:
        ms = quartiles([1e3 * v for v in results[d_ff]])
        spec, size = specs[d_ff]
        matmul = ffn_matmul_params(d, d_ff, True)
        rows.append({"d_ff": d_ff, "multiple_of": multiple_of, "ms_median": ms["median"], "ms_iqr": ms["iqr"],
                     "ms": ms, "params": size.params, "ns_per_param": ms["median"] * 1e6 / size.params,
                     "tflops": 6 * s.tokens * matmul / (ms["median"] / 1e3) / 1e12,
                     "d_model": d, "tokens": s.tokens, "act": spec.act})
    dtype = f"{session.precision} autocast" if session.gpu else "fp32"
    notes = [f"one SwiGLU FFN layer (no bias), d_model={d}, {s.tokens} tokens, forward + backward in "
             f"{dtype}; median ± IQR/2 of {s.reps} interleaved repetitions of {s.inner} calls; "
             "ns/param = median time ÷ FFN parameters",
             "682 = 2/3·4·256 truncated (ffn.budget=4 with multiple_of=1 gives 683); 640 is the multiple of 128 below "
             "it, 704 and 768 the multiples of 64 and 256 above it",
             "C9: 704 must take no more time than 682 although larger, and 640 must cost no more per parameter than "
             "682 although smaller (larger GEMMs are cheaper per parameter, aligned or not)"]
    if not session.gpu:
        notes.append("CPU: no tensor cores, so claim C9 is not tested here (the report marks it inconclusive); the "
                     "rows show how this CPU's GEMMs treat the three sizes")
    settings = {"d_model": d, "tokens": s.tokens, "act": "swiglu", "bias": False, "reps": s.reps,
                "inner": s.inner, "warmup_calls": WARMUP_CALLS, "device": str(session.device),
                "dtype": dtype}
    return {"settings": settings, "load": load, "rows": rows, "notes": notes}


def tables(record: Mapping[str, Any]) -> list[str]:
    """One row per d_ff, its time per parameter relative to the first row's (the unaligned size)."""
    rows = record["rows"]
    header = ["d_ff", "multiple of", "ms (fwd+bwd)", "params", "ns/param", "TFLOP/s", "ns/param ÷ 682"]
    return [table(header, [
        [r["d_ff"], r["multiple_of"], median_iqr(r["ms"], ".4g"), fmt(r["params"], ","),
         fmt(r["ns_per_param"], ".4g"), fmt(r["tflops"], ".3g"),
         fmt(r["ns_per_param"] / rows[0]["ns_per_param"], ".3f")]
        for r in rows])]
