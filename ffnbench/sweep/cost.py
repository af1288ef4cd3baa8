"""What a robust GPU sweep costs before a GPU-minute is spent: per arm (ffnbench.sweep.arms) and in all, its runs,
tokens, training FLOPs and GPU-hours, the factors each claim will be checked on, and — given a budget in GPU-hours
— the arms that fit in priority order, with what each cut arm leaves unchecked.

Every run's FLOPs are known from its config (progress.planned_flops; the lr and seed change none of them). The
judged runs count at the chosen lr and its two neighbours where lr_protocol.judge_neighbours asks; bracketing may
add up to lr_protocol.bracket_cap half-octave steps × the tuning seeds per variant, counted as an upper bound.

Throughput: the MFU `make gpu-check` measured on the sweep's shape (experiments/bench/<gpu>/gpucheck.json) where a
result exists for the GPU; otherwise DEFAULT_MFU of the GPU's bf16 peak (the one detected, or `--gpu NAME`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from ffnbench.claims.lr_protocol import LrProtocol
from ffnbench.config.compose import CONF_DIR, compose_many
from ffnbench.config.schema import run_spec, to_container
from ffnbench.data.tokenizer import vocab_size_for
from ffnbench.sweep.arms import Arm, checked_factors
from ffnbench.sweep.progress import planned_flops
from ffnbench.training.throughput import gpu_peak_flops, gpu_row
from hydra_plugins.ffnbench_sweeper.grid_sweeper import expand_grids

DEFAULT_MFU = 0.40  # of the bf16 dense peak, where no gpu-check result exists: a compiled small model's usual range
DEFAULT_GPU = "H100"  # the GPU a machine without one prices the sweep on, unless --gpu names another
BENCH_DIR = CONF_DIR.parent / "experiments" / "bench"


@dataclass
class ArmCost:
    """One arm's share: runs (tuning, judged incl. neighbours), bracketing's upper bound, tokens, FLOPs."""

    arm: Arm | None  # None: grids the preset spells out
    runs: int = 0
    tuning: int = 0
    judged: int = 0
    bracketing_max: int = 0
    tokens: float = 0.0
    flops: float = 0.0
    bracketing_flops: float = 0.0
    grids: list[int] = field(default_factory=list)  # the indices of its grids in the preset's expanded list

    @property
    def name(self) -> str:
        return self.arm.name if self.arm else "spelled-out grids"


@dataclass(frozen=True)
class Throughput:
    """FLOP/s one GPU delivers on the sweep's runs, and where the figure comes from."""

    gpu: str
    flops_per_s: float
    source: str

    def hours(self, flops: float, gpus: int = 1) -> float:
        return flops / self.flops_per_s / 3600 / max(1, gpus)


def throughput(gpu: str | None = None, bench_dir: Path = BENCH_DIR) -> Throughput:
    """The measured MFU of a gpu-check result for this GPU where there is one, else DEFAULT_MFU of its bf16 peak."""
    name = gpu or _detected_gpu() or DEFAULT_GPU
    row = gpu_row(name)
    label = row[0] if row else name
    peak = gpu_peak_flops(name, "bf16-mixed")
    for path in sorted(bench_dir.glob("*/gpucheck.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if gpu_row(str(record.get("gpu") or "")) != row or row is None:
            continue
        shapes = [r for r in record.get("training") or [] if r.get("mfu")]
        if shapes:
            best = shapes[-1]  # the sweep's own shape is gpu-check's last training row
            where = path.relative_to(CONF_DIR.parent) if path.is_relative_to(CONF_DIR.parent) else path
            return Throughput(label, float(best["mfu"]) * float(best["peak_flops"]),
                              f"MFU {best['mfu']:.3f} measured by `make gpu-check` ({where})")
    if peak is None:
        raise ValueError(f"--gpu {name}: not in ffnbench/training/throughput.py's GPU_PEAK_FLOPS; name a listed GPU "
                         "(e.g. H100, A100) or add its peak")
    how = "detected" if gpu is None and _detected_gpu() else ("named with --gpu" if gpu else "the default GPU")
    return Throughput(label, DEFAULT_MFU * peak, f"a stated default: {DEFAULT_MFU:.0%} of the {label}'s bf16 peak "
                                                 f"({peak / 1e12:.0f} TFLOP/s; {how}); no gpu-check result for it")


def _detected_gpu() -> str | None:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def arm_costs(experiment: str, grids: Sequence[tuple[dict, Arm | None]], args: Sequence[str],
              protocol: LrProtocol) -> list[ArmCost]:
    """Each arm's cost (the preset's own grids as one more entry), in priority order. One job per distinct config
    is composed (every job of a grid has its FLOPs, whatever its lr and seed)."""
    costs: dict[str | None, ArmCost] = {}
    for index, (grid, arm) in enumerate(grids):
        cost = costs.setdefault(arm.name if arm else None, ArmCost(arm))
        cost.grids.append(index)
        jobs = expand_grids(None, [grid], [f"experiment={experiment}", *args])
        seeds = len({o for job in jobs for o in job if o.startswith("seed=")})
        distinct: dict[tuple, list[str]] = {}
        for job in jobs:
            key = tuple(o for o in job if not o.startswith(("seed=", "optim.lr=")))
            distinct.setdefault(key, [*(o for o in job if not o.startswith("optim.lr=")), "optim.lr=0.001"])
        per_config = len(jobs) // max(1, len(distinct))
        tuned = grid.get("optim.lr") == "tuned"
        factor = 3 if tuned and protocol.judge_neighbours else 1
        for cfg in compose_many(list(distinct.values())):
            config = to_container(cfg)
            spec = run_spec(config, vocab_size_for(config["data"]))
            batch = int(config["data"]["batch_size"])
            flops = planned_flops(spec, batch)
            tokens = spec.total_steps(batch * spec.model.seq_len) * batch * spec.model.seq_len
            n = per_config * factor
            cost.runs += n
            cost.flops += n * flops
            cost.tokens += n * tokens
            if tuned:
                cost.judged += n
            else:
                cost.tuning += n
                extra = protocol.bracket_cap * max(1, seeds)
                cost.bracketing_max += extra
                cost.bracketing_flops += extra * flops
    return sorted(costs.values(), key=lambda c: (c.arm is not None, c.arm.priority if c.arm else 0))


def within_budget(costs: list[ArmCost], tp: Throughput, gpu_hours: float, gpus: int = 1) -> tuple[list[ArmCost],
                                                                                                  list[ArmCost]]:
    """(kept, cut): the arms in priority order while their GPU-hours (bracketing's upper bound included) fit the
    budget; the first that does not fit, and every later one, are cut (a later, cheaper arm never jumps the queue:
    the priority is what the verdicts need first)."""
    kept, spent = [], 0.0
    for i, c in enumerate(costs):
        need = tp.hours(c.flops + c.bracketing_flops, gpus)
        if spent + need > gpu_hours:
            return kept, costs[i:]
        kept.append(c)
        spent += need
    return kept, []


def trained_claims(experiment: str) -> list[str]:
    """The trained claims `experiment` tests (every one for `full`)."""
    from ffnbench.claims import CLAIMS

    return [c.id for c in CLAIMS if c.kind == "trained" and (experiment == "full" or c.experiment == experiment)]


def describe(experiment: str, costs: list[ArmCost], tp: Throughput, gpus: int, cut: list[ArmCost] | None = None,
             budget: float | None = None) -> list[str]:
    """The dry-run's cost lines: a row per arm, the total, the factors per claim, and the cut arms."""
    kept = [c for c in costs if c not in (cut or [])]
    lines = [f"cost ({tp.gpu}; throughput: {tp.source}):"]
    for c in costs:
        mark = "  CUT" if cut and c in cut else ""
        checks = f", checks {c.arm.checks}" if c.arm and c.arm.checks else ""
        lines.append(f"  arm {c.name}{checks}: {c.runs} runs ({c.tuning} tuning, {c.judged} judged) + up to "
                     f"{c.bracketing_max} bracketing; {c.tokens / 1e9:.2f}B tokens; {c.flops:.3g} FLOPs; "
                     f"{tp.hours(c.flops):.1f} GPU-h (+ up to {tp.hours(c.bracketing_flops):.1f}){mark}")
    total = sum(c.flops for c in kept)
    extra = sum(c.bracketing_flops for c in kept)
    lines.append(f"  total: {sum(c.runs for c in kept)} runs; {total:.3g} FLOPs; {tp.hours(total):.1f} GPU-h (+ up to "
                 f"{tp.hours(extra):.1f} bracketing) on 1 GPU; {tp.hours(total + extra, gpus):.1f} h on {gpus} "
                 f"GPU{'s' * (gpus != 1)} (one job per GPU)")
    arms = [c.arm for c in kept if c.arm]
    factors = ", ".join(checked_factors(arms)) if arms else "lr only where the preset tunes it"
    lines.append(f"  checked on: {factors} — for {', '.join(trained_claims(experiment)) or 'no trained claim'}")
    if cut:
        left = [c.arm.checks for c in cut if c.arm and c.arm.checks]
        lines.append(f"  cut for the budget of {budget:g} GPU-h: {', '.join(c.name for c in cut)}; left unchecked: "
                     f"{', '.join(left) or 'nothing the kept arms do not check'} (the report's verdicts name every "
                     "factor left unchecked)")
    return lines


def sweeper_node(sweep_cfg) -> dict:
    return {k: OmegaConf.to_container(v) if OmegaConf.is_config(v) else v
            for k, v in sweep_cfg.hydra.sweeper.items()}
