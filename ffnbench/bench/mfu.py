"""The MFU benchmark: achieved model FLOP/s ÷ peak FLOP/s of the pipeline and of the hand loop. On a CPU the
peak is throughput.py's probe (the best of timed 1024×1024 fp32 GEMMs, about a second each), run here as one more
interleaved contender, so that it sees the same machine state as the models; on a GPU the datasheet dense peak at
the precision trainer=gpu trains in there (bf16, or fp16 before Ampere)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ffnbench.bench.contenders import Pipeline, hand_trial, pipeline_overrides
from ffnbench.bench.render import goal, median_iqr, table
from ffnbench.bench.session import BenchSession
from ffnbench.bench.timing import interleaved, load_snapshot, quartiles
from ffnbench.tables import fmt

NAME = "mfu"
TITLE = "MFU"
SUMMARY = ("achieved model FLOP/s ÷ peak FLOP/s (CPU: the fp32 GEMM probe of throughput.py, measured here; GPU: the "
           "datasheet dense peak), tiny and small models")
CPU_MFU_GOAL = 0.7  # the pipeline's MFU at the tiny model on a CPU, what `make bench` aims for (docs/benchmarks.md)


@dataclass(frozen=True)
class Sizes:
    """How much the MFU benchmark does."""

    models: tuple[tuple[str, int], ...]  # (model, global batch)
    steps: dict[str, tuple[int, int]]  # model -> (warm-up steps, timed steps)
    reps: int


SIZES: Mapping[str, Sizes] = {
    "quick": Sizes(models=(("micro", 8),), steps={"micro": (10, 10)}, reps=2),
    "gpu": Sizes(models=(("tiny", 32), ("small", 32)), steps={"tiny": (20, 100), "small": (10, 50)}, reps=5),
    "cpu": Sizes(models=(("tiny", 32), ("small", 4)), steps={"tiny": (10, 20), "small": (10, 10)}, reps=3),
}


def gpu_peak(session: BenchSession) -> dict[str, Any]:
    """The denominator of MFU on a GPU: the datasheet dense peak at the session's precision, and its source."""
    from ffnbench.training.throughput import gpu_peak_flops

    name = torch.cuda.get_device_name(session.device)
    peak = gpu_peak_flops(name, session.precision)
    return {"peak_flops": peak,
            "source": (f"datasheet dense {session.precision} peak of {name} (throughput.GPU_PEAK_FLOPS)" if peak
                       else f"no {session.precision} peak for {name!r} in throughput.GPU_PEAK_FLOPS")}


def cpu_peak(session: BenchSession, probe_readings: list[float]) -> dict[str, Any]:
    """The denominator of MFU on a CPU: the best probe reading taken here, next to what training runs use."""
    from ffnbench.training.throughput import cpu_peak_flops

    return {"peak_flops": max(probe_readings),
            "source": "measured: throughput.measure_cpu_peak_flops, the best reading",
            "probe_readings": quartiles(probe_readings),
            "probe": "fp32 torch.mm of two 1024×1024 matrices, 4 back-to-back per timing, best timing over "
                     "about 1 s, with torch's default thread count; interleaved with the model runs",
            # what training runs on this machine divide by (the best reading ever seen)
            "training_runs_peak_flops": cpu_peak_flops(session.cache_dir),
            "training_runs_peak_source": "throughput.cpu_peak_flops: the best probe reading ever cached "
                                         "in data.cache_dir for this CPU, thread count and torch"}


def _add_mfu(session: BenchSession, row: dict[str, Any], peak: float | None) -> None:
    """MFU per repetition (tokens/s × FLOPs/token ÷ peak) of both contenders, and the goal at the tiny model."""
    for who in ("hand", "pipeline"):
        mfus = [t * row["flops_per_token"] / peak for t in row["raw"][who]] if peak else None
        row[f"{who}_mfu"] = quartiles(mfus) if mfus else None
        row[f"{who}_achieved_flops"] = row[f"{who}_tokens_per_s"]["median"] * row["flops_per_token"]
    row["peak_flops"] = peak
    if not session.gpu and row["model"] == "tiny" and row["pipeline_mfu"]:
        row["goal"] = CPU_MFU_GOAL
        row["meets_goal"] = row["pipeline_mfu"]["median"] >= CPU_MFU_GOAL


def measure(session: BenchSession) -> dict[str, Any]:
    """The MFU record: settings, load, one row per model of `Sizes.models`, the peak, notes."""
    from ffnbench.config.schema import model_config
    from ffnbench.data.tokenizer import vocab_size_for
    from ffnbench.model.accounting import count_flops
    from ffnbench.training.throughput import measure_cpu_peak_flops

    s: Sizes = session.sizes[NAME]
    rows, probe_readings = [], []
    load = {"before": load_snapshot()}
    for model, batch in s.models:
        warmup, steps = s.steps[model]
        pipeline = Pipeline(session, pipeline_overrides(session, model, batch), warmup, steps)
        cfg = pipeline.cfg
        mcfg = model_config(cfg, vocab_size_for(cfg.data))
        flops = count_flops(mcfg, causal=True)  # as the pipeline's ThroughputMonitor counts it
        trials: dict[str, Callable[[], float]] = {"hand": hand_trial(session, cfg, pipeline.warmup, pipeline.steps),
                                                  "pipeline": pipeline}
        if not session.gpu:
            trials["probe"] = lambda: measure_cpu_peak_flops(seconds=0.3 if session.quick else 1.0)
        results = interleaved(trials, s.reps)
        probe_readings += results.get("probe", [])
        rows.append({"model": model, "d_model": mcfg.d_model, "n_layer": mcfg.n_layer, "seq_len": mcfg.seq_len,
                     "batch_size": batch, "flops_per_token": flops.training, "flops": flops.as_dict(),
                     "hand_tokens_per_s": quartiles(results["hand"]),
                     "pipeline_tokens_per_s": quartiles(results["pipeline"]),
                     "raw": dict(results)})
    peak_info = gpu_peak(session) if session.gpu else cpu_peak(session, probe_readings)
    for row in rows:
        _add_mfu(session, row, peak_info["peak_flops"])
    load["after"] = load_snapshot()
    notes = [f"peak {fmt(peak_info['peak_flops'], '.4g')} FLOP/s: {peak_info['source']}"]
    if not session.gpu:
        pr = peak_info["probe_readings"]
        notes.append(f"probe readings: median {pr['median']:.4g}, IQR {pr['iqr']:.3g}, n={pr['n']}; training runs here "
                     f"divide by the best cached reading, {peak_info['training_runs_peak_flops']:.4g} FLOP/s")
    notes.append("model FLOPs per token = accounting.count_flops(..., causal=True).training: 6 × matmul weights (tied "
                 "head included) + the attention context term counted as a causal kernel computes it (each query "
                 "against (T + 1)/2 keys on average), at the model's seq_len")
    settings = {"overrides": {m: pipeline_overrides(session, m, b) for m, b in s.models}, "steps": s.steps,
                "reps": s.reps, "device": str(session.device), "compile": session.gpu,
                "precision": session.precision}
    return {"settings": settings, "load": load, "rows": rows, "peak": peak_info, "notes": notes}


def tables(record: Mapping[str, Any]) -> list[str]:
    """One row per model: tokens/s and MFU of the hand loop and of the pipeline."""
    header = ["model", "tokens/step", "FLOPs/token", "hand tok/s", "hand MFU", "pipeline tok/s", "pipeline MFU",
              "goal"]
    return [table(header, [
        [r["model"], r["batch_size"] * r["seq_len"], fmt(float(r["flops_per_token"]), ".3g"),
         median_iqr(r["hand_tokens_per_s"], ".0f"), median_iqr(r["hand_mfu"], ".3f"),
         median_iqr(r["pipeline_tokens_per_s"], ".0f"), median_iqr(r["pipeline_mfu"], ".3f"),
         goal(r["meets_goal"], f"≥ {r['goal']}") if "goal" in r else ""]
        for r in record["rows"]])]
