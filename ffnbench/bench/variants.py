"""The variants benchmark: every FFN variant at matched budget (ffn.budget=4), forward + backward of one FFN
layer and a whole training step of the hand loop, eager and compiled."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from ffnbench.bench.contenders import HandLoop, Pipeline, data_batches, pipeline_overrides
from ffnbench.bench.render import median_iqr, speedup, table
from ffnbench.bench.session import BenchSession
from ffnbench.bench.timing import LayerTrial, Trial, interleaved, load_snapshot, paired_ratios, quartiles
from ffnbench.tables import fmt

NAME = "variants"
TITLE = "FFN variants at matched budget"
SUMMARY = ("every FFN variant at matched budget: one FFN layer forward+backward, and a whole training step, eager "
           "and compiled")
BUDGET = 4  # every variant has the parameters of a 4·d ungated FFN


@dataclasses.dataclass(frozen=True)
class Sizes:
    """How much the variants benchmark does."""

    model: str
    batch: int
    variants: tuple[str, ...] | None  # None: every variant of the registry
    compile: bool | tuple[str, ...]  # True: every variant compiled too; a tuple: only those
    layer_inner: int  # calls of a layer per timing
    step_inner: int  # steps per timing
    reps: int


SIZES: Mapping[str, Sizes] = {
    "quick": Sizes(model="micro", batch=4, variants=("gelu", "swiglu"), compile=("gelu",), layer_inner=2,
                   step_inner=1, reps=2),
    "gpu": Sizes(model="small", batch=32, variants=None, compile=True, layer_inner=50, step_inner=10, reps=7),
    "cpu": Sizes(model="tiny", batch=32, variants=None, compile=True, layer_inner=4, step_inner=2, reps=5),
}


class StepTrial(Trial):
    """One whole training step (the hand loop's: forward, backward, clipping, AdamW) of a model."""

    def __init__(self, session: BenchSession, cfg, mcfg, batches, inner: int, compile: bool):
        self.session, self.inner = session, inner
        self.loop = HandLoop(session, cfg, mcfg=mcfg, batches=batches, compile=compile)

    def call(self) -> None:
        self.loop.step()


def measure(session: BenchSession) -> dict[str, Any]:
    """The variants record: settings, load, one row per variant, notes."""
    # Every variant recompiles FeedForward.forward (and Block.forward): beyond dynamo's default limit of 8 it would
    # silently run the rest eagerly.
    with torch._dynamo.config.patch(recompile_limit=max(64, torch._dynamo.config.recompile_limit)):
        return _measure(session)


def _variant_row(name: str, spec, base, n_tokens: int, trials: dict[str, Trial],
                 results: dict[str, list[float]], ms: dict[str, dict]) -> dict[str, Any]:
    from ffnbench.model.ffn import size_ffn

    size = size_ffn(spec, base.d_model)
    row: dict[str, Any] = {"variant": name, "gated": spec.gated, "d_model": base.d_model,
                           "d_ff": size.d_ff, "ffn_params_per_layer": size.params,
                           "budget_mismatch": size.mismatch, "n_layer": base.n_layer, "tokens": n_tokens}
    for what in ("layer", "step"):
        for mode in ("eager", "compiled"):
            key = f"{name}/{what}/{mode}"
            row[f"{what}_{mode}_ms"] = ms.get(key)
            row[f"{what}_{mode}_first_call_s"] = trials[key].first_call_s if key in trials else None
        if f"{name}/{what}/compiled" in results:
            row[f"{what}_compile_speedup"] = quartiles(paired_ratios(results[f"{name}/{what}/eager"],
                                                                     results[f"{name}/{what}/compiled"]))
        else:
            row[f"{what}_compile_speedup"] = None
    row["ffn_share_of_step"] = (base.n_layer * ms[f"{name}/layer/eager"]["median"]
                                / ms[f"{name}/step/eager"]["median"])
    return row


def _measure(session: BenchSession) -> dict[str, Any]:
    from ffnbench.config.schema import model_config
    from ffnbench.data.tokenizer import vocab_size_for
    from ffnbench.model.ffn import VARIANTS, FeedForward, FFNSpec

    s: Sizes = session.sizes[NAME]
    names = list(s.variants or VARIANTS)
    compiled = set(names if s.compile is True else (s.compile or ()))
    cfg = Pipeline(session, pipeline_overrides(session, s.model, s.batch), 0, 1).cfg
    base = model_config(cfg, vocab_size_for(cfg.data))
    batches = data_batches(cfg, base.seq_len, pin=session.gpu)
    n_tokens = s.batch * base.seq_len
    load = {"before": load_snapshot()}
    trials: dict[str, Trial] = {}
    specs = {name: FFNSpec(act=name, budget=BUDGET) for name in names}
    for name, spec in specs.items():
        mcfg = dataclasses.replace(base, ffn=spec)
        for mode in ("eager", "compiled") if name in compiled else ("eager",):
            c = mode == "compiled"
            torch.manual_seed(0)
            trials[f"{name}/layer/{mode}"] = LayerTrial(session, FeedForward(base.d_model, spec), n_tokens,
                                                        base.d_model, s.layer_inner, compile=c)
            trials[f"{name}/step/{mode}"] = StepTrial(session, cfg, mcfg, batches, s.step_inner, compile=c)
    for trial in trials.values():
        trial.warm_up()
    results = interleaved(trials, s.reps)
    load["after"] = load_snapshot()
    ms = {k: quartiles([1e3 * v for v in vals]) for k, vals in results.items()}
    rows = [_variant_row(name, specs[name], base, n_tokens, trials, results, ms) for name in names]
    ref = next((r for r in rows if r["variant"] == "gelu"), rows[0])
    for row in rows:
        row["step_vs_" + ref["variant"]] = row["step_eager_ms"]["median"] / ref["step_eager_ms"]["median"]
    notes = [f"model {s.model} (d_model={base.d_model}, {base.n_layer} layers), {n_tokens} tokens per "
             f"call/step; every variant at ffn.budget={BUDGET} (the parameters of a {BUDGET}·d ungated FFN)",
             f"median ± IQR/2 of {s.reps} interleaved repetitions (layer: {s.layer_inner} calls each, "
             f"step: {s.step_inner} steps each), after 3 warm-up calls (compilation included there)",
             "compiled: torch.compile of the FFN module (layer) and of each block in place, as trainer.compile=true "
             "does (step); FFN share of step = n_layer × layer time ÷ step time (eager)"]
    settings = {"overrides": pipeline_overrides(session, s.model, s.batch), "budget": BUDGET,
                "tokens": n_tokens, "reps": s.reps, "layer_inner": s.layer_inner,
                "step_inner": s.step_inner, "warmup_calls": 3, "compiled": sorted(compiled),
                "device": str(session.device), "autocast": session.precision if session.gpu else None}
    return {"settings": settings, "load": load, "rows": rows, "notes": notes}



def tables(record: Mapping[str, Any]) -> list[str]:
    """One row per variant: a layer's and a step's time, eager and compiled, against the reference variant's step."""
    rows = record["rows"]
    ref_key = next(k for k in rows[0] if k.startswith("step_vs_"))  # the variant the steps are compared with
    header = ["variant", "d_ff", "FFN params", "layer ms eager", "layer ms compiled", "speed-up", "step ms eager",
              "step ms compiled", "speed-up", f"step ÷ {ref_key.removeprefix('step_vs_')}", "FFN share of step"]
    return [table(header, [
        [r["variant"], r["d_ff"], fmt(r["ffn_params_per_layer"], ","), median_iqr(r["layer_eager_ms"], ".3g"),
         median_iqr(r["layer_compiled_ms"], ".3g"), speedup(r["layer_compile_speedup"]),
         median_iqr(r["step_eager_ms"], ".4g"), median_iqr(r["step_compiled_ms"], ".4g"),
         speedup(r["step_compile_speedup"]), fmt(r[ref_key], ".3f"), fmt(r["ffn_share_of_step"], ".0%")]
        for r in rows])]
