"""What a robust GPU sweep costs before a GPU-minute is spent: per arm (ffnbench.sweep.arms) and in all, its runs,
tokens, training FLOPs and GPU-hours, the factors each claim will be checked on, and — given a budget in GPU-hours
— the arms that fit in priority order, with what each cut arm leaves unchecked.

The runs are the plan's own (ffnbench.sweep.planning: one per resolved config, composed once), so the cost block
counts exactly the runs the dry run's header counts: the judged runs at the chosen lr and, where
lr_protocol.judge_neighbours asks, at its two neighbours (before the choice, each waiting judged job counts for the
three). Bracketing may add up to lr_protocol.bracket_cap half-octave steps × the tuning seeds per tuning group whose
choice is still to come: counted apart, as an upper bound.

A run's GPU time is its training FLOPs at the MFU of its model size, plus a fixed overhead per run (Price.seconds).
Both come from `make gpu-check`'s record for the GPU (experiments/bench/<gpu>/gpucheck.json, its `price` block:
{"gpu": name, "mfu": {size: fraction}, "overhead_s_per_run": {size: seconds}, "attention_flops": "causal"}) where it
has a figure for the size; otherwise from the stated defaults below. Attention FLOPs are counted as the record counts
them (causal, as gpu-check and train()'s MFU count them, when there is no record). The dry run says which figure
was measured and which assumed."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ffnbench.config.compose import CONF_DIR
from ffnbench.model.accounting import count_flops
from ffnbench.sweep.arms import Arm, checked_factors
from ffnbench.sweep.planning import PlannedRun, Work
from ffnbench.training.throughput import gpu_peak_flops, gpu_row

DEFAULT_GPU = "H100"  # the GPU a machine without one prices the sweep on, unless --gpu names another
BENCH_DIR = CONF_DIR.parent / "experiments" / "bench"
# MFU (of the bf16 dense peak) where no gpu-check record measures one for the size. `small` (d_model 384, K = 384
# GEMMs, 256-token attention, hundreds of kernel launches a step even compiled) rarely keeps an H100's tensor cores
# busy: 15-25% is what models this size reach, so 20%. `base` (GPT-2 small's shape: d_model 768, 1024-token context)
# has 4x the work per launch: 30%, below the ~40% nanoGPT-style GPT-2 small training reports. Anything smaller (tiny,
# mini, micro) or of a custom shape is launch-bound: 10%.
DEFAULT_MFU = {"small": 0.20, "base": 0.30}
DEFAULT_MFU_OTHER = 0.10
# Seconds a run spends beyond its training steps, where no gpu-check record measures it: process start and imports
# (~10 s), compiling (a training graph per compiled function, validation eager: ~30 s cold), validation passes (14 for a
# `small` run at val_every 250, ~5 s), checkpoints (6 of ~167 MB for `small`, ~6 s) and wandb's start-up (~5 s): about
# a minute for `small` (issue 42 counts the same parts; conf/experiment/_gpu.yaml said "about a minute per run").
# `base`: twice that (larger graphs to compile, 4x the validation tokens per pass, 1 GB checkpoints). Others: a minute.
DEFAULT_OVERHEAD_S = {"small": 60.0, "base": 120.0}
DEFAULT_OVERHEAD_OTHER_S = 60.0
ATTENTION_CONVENTIONS = ("causal", "full")


@dataclass(frozen=True)
class Figure:
    """One number of the price, and whether `make gpu-check` measured it or it is a stated default."""

    value: float
    measured: bool


@dataclass(frozen=True)
class Price:
    """What a run costs on one GPU: its training FLOPs at the MFU of its size, plus a fixed overhead per run.

    Attributes:
        gpu: the GPU's name as the peak table has it (training.throughput.GPU_PEAK_FLOPS).
        peak: its bf16 dense peak, FLOP/s.
        how: how the GPU was chosen (detected, named with --gpu, the default).
        mfu, overhead_s: what a gpu-check record measured, per model size (empty without a record).
        peaks: the peak each measured MFU is a fraction of, per size (the record's; else `peak`).
        causal: whether attention FLOPs are counted causal (as the record's MFU counts them).
        record: the gpu-check record read, relative to the repository where it lies in it; None without one.
        note: why a record for this GPU was not used, if one was not.
    """

    gpu: str
    peak: float
    how: str
    mfu: dict[str, float] = field(default_factory=dict)
    overhead_s: dict[str, float] = field(default_factory=dict)
    peaks: dict[str, float] = field(default_factory=dict)
    causal: bool = True
    record: str | None = None
    note: str = ""

    def mfu_of(self, size: str) -> Figure:
        if size in self.mfu:
            return Figure(self.mfu[size], True)
        return Figure(DEFAULT_MFU.get(size, DEFAULT_MFU_OTHER), False)

    def overhead_of(self, size: str) -> Figure:
        if size in self.overhead_s:
            return Figure(self.overhead_s[size], True)
        return Figure(DEFAULT_OVERHEAD_S.get(size, DEFAULT_OVERHEAD_OTHER_S), False)

    def flops(self, work: Work) -> float:
        """The run's training FLOPs, attention counted as the MFU it is priced at counts it."""
        return _training_flops_per_token(work.model, self.causal) * work.tokens

    def seconds(self, work: Work) -> float:
        """One run's GPU seconds: its training FLOPs at its size's MFU of the peak, plus its fixed overhead."""
        mfu = self.mfu_of(work.size)
        peak = self.peaks.get(work.size, self.peak) if mfu.measured else self.peak
        return self.flops(work) / (mfu.value * peak) + self.overhead_of(work.size).value

    def describe(self, sizes: Sequence[str]) -> list[str]:
        """Where each figure the runs of these model sizes are priced with comes from: measured or assumed."""
        where = f"measured by `make gpu-check` ({self.record})"

        def said(figure: Figure, text: str) -> str:
            return f"{text} {'measured' if figure.measured else 'assumed'}"

        mfu = ", ".join(said(self.mfu_of(s), f"{s} {self.mfu_of(s).value:.3g}") for s in sizes)
        over = ", ".join(said(self.overhead_of(s), f"{s} {self.overhead_of(s).value:.0f} s") for s in sizes)
        source = [where] if self.record else []
        if not all(self.mfu_of(s).measured and self.overhead_of(s).measured for s in sizes):
            source.append("assumed: ffnbench/sweep/cost.py's stated defaults (DEFAULT_MFU, DEFAULT_OVERHEAD_S)")
        lines = [f"  price of a run: its training FLOPs at its size's MFU of the {self.gpu}'s bf16 peak "
                 f"({self.peak / 1e12:.0f} TFLOP/s; {self.how}), plus a fixed overhead per run (start, compiles, "
                 f"validation, checkpoints, wandb); attention FLOPs counted {'causal' if self.causal else 'full'}"
                 + (", as gpu-check counts them" if self.record else ", as gpu-check and train()'s MFU count them"),
                 f"    MFU: {mfu}", f"    overhead per run: {over}", f"    {'; '.join(source)}"]
        if self.note:
            lines.append(f"    {self.note}")
        return lines


@functools.lru_cache(maxsize=4096)
def _training_flops_per_token(model, causal: bool) -> float:
    return float(count_flops(model, causal=causal).training)


def price(gpu: str | None = None, bench_dir: Path | None = None) -> Price:
    """The price on `gpu` (default: the one detected, else DEFAULT_GPU): the figures of the newest gpu-check record
    for it under `bench_dir` (default: BENCH_DIR) where it has them, stated defaults elsewhere.

    Raises:
        ValueError: a GPU the peak table does not know (nothing to price it by).
    """
    detected = _detected_gpu() if gpu is None else None
    name = gpu or detected or DEFAULT_GPU
    row = gpu_row(name)
    peak = gpu_peak_flops(name, "bf16-mixed")
    if row is None or peak is None:
        raise ValueError(f"--gpu {name}: not in ffnbench/training/throughput.py's GPU_PEAK_FLOPS; name a listed GPU "
                         "(e.g. H100, A100) or add its peak")
    how = "detected" if detected else ("named with --gpu" if gpu else "the default GPU; --gpu names another")
    found = []
    for path in sorted(Path(bench_dir or BENCH_DIR).glob("*/gpucheck.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and gpu_row(_record_gpu(record)) == row:
            found.append((str(record.get("date") or ""), path, record))
    if not found:
        return Price(row[0], peak, how)
    _, path, record = max(found, key=lambda f: (f[0], str(f[1])))
    where = str(path.relative_to(CONF_DIR.parent) if path.is_relative_to(CONF_DIR.parent) else path)
    block = record.get("price")
    if not isinstance(block, dict):
        return Price(row[0], peak, how, note=f"{where} has no `price` block (a gpu-check from before it priced runs): "
                                             "run `make gpu-check` again to measure MFU and overhead")
    try:
        mfu = _figures(block.get("mfu"), "mfu", low=0.0, high=1.0)
        overhead = _figures(block.get("overhead_s_per_run"), "overhead_s_per_run", low=0.0, high=None)
        peaks = _figures(block.get("peak_flops"), "peak_flops", low=0.0, high=None)
        attention = block.get("attention_flops", "causal")
        if attention not in ATTENTION_CONVENTIONS:
            raise ValueError(f"attention_flops {attention!r}, expected one of {', '.join(ATTENTION_CONVENTIONS)}")
    except ValueError as e:
        return Price(row[0], peak, how, note=f"{where}'s price block was not used: {e}")
    return Price(row[0], peak, how, mfu, overhead, peaks, attention == "causal", where)


def _record_gpu(record: dict) -> str:
    """The GPU a gpu-check record measured: its price block's name, else its machine block's."""
    block = record.get("price") if isinstance(record.get("price"), dict) else {}
    machine = record.get("machine") if isinstance(record.get("machine"), dict) else {}
    return str(block.get("gpu") or machine.get("gpu") or "")


def _figures(node: Any, name: str, low: float, high: float | None) -> dict[str, float]:
    """{size: number} of a price block, each a number in (low, high]; nulls (not measured) left out."""
    if node is None:
        return {}
    if not isinstance(node, dict):
        raise ValueError(f"{name} is not a {{model size: number}} mapping")
    out = {}
    for size, value in node.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not (
                value > low and (high is None or value <= high)):
            raise ValueError(f"{name}.{size} = {value!r} is not a number in ({low:g}, {high if high else '∞'}]")
        out[str(size)] = float(value)
    return out


def _detected_gpu() -> str | None:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


@dataclass
class ArmCost:
    """One arm's share of the plan: its runs (tuning, judged incl. neighbours), bracketing's upper bound, tokens,
    FLOPs and GPU seconds."""

    arm: Arm | None  # None: grids the preset spells out
    runs: int = 0
    tuning: int = 0
    judged: int = 0
    bracketing_max: int = 0
    tokens: float = 0.0
    flops: float = 0.0
    seconds: float = 0.0
    bracketing_flops: float = 0.0
    bracketing_seconds: float = 0.0
    grids: list[int] = field(default_factory=list)  # the indices of its grids in the preset's expanded list

    @property
    def name(self) -> str:
        return self.arm.name if self.arm else "spelled-out grids"

    def hours(self, gpus: int = 1) -> float:
        return self.seconds / 3600 / max(1, gpus)

    def bracketing_hours(self, gpus: int = 1) -> float:
        return self.bracketing_seconds / 3600 / max(1, gpus)


def arm_costs(runs: Sequence[PlannedRun], grids: Sequence[tuple[dict, Arm | None]], price: Price,
              bracket_cap: int) -> list[ArmCost]:
    """Each arm's cost (the preset's own grids as one more entry), in priority order, from the plan's runs.

    Args:
        runs: the plan (planning.plan).
        grids: the preset's grids with their arms (planning.preset_grids), which the runs' `grid` indexes.
        price: what a run costs.
        bracket_cap: lr_protocol.bracket_cap: half-octave steps bracketing may add per tuning group.
    """
    costs: dict[str | None, ArmCost] = {}

    def arm_of(grid: int | None) -> ArmCost:
        arm = grids[grid][1] if grid is not None and grid < len(grids) else None
        cost = costs.setdefault(arm.name if arm else None, ArmCost(arm))
        if grid is not None and grid not in cost.grids:
            cost.grids.append(grid)
        return cost

    seeds: dict[frozenset, set] = {}  # tuning group → its tuning seeds
    extended: dict[frozenset, int] = {}  # tuning group → extension runs planned already
    sample: dict[frozenset, PlannedRun] = {}  # tuning group → one of its tuning runs (what an extension costs)
    waiting: set[frozenset] = set()  # tuning groups whose judged runs wait for their choice
    for r in runs:
        cost = arm_of(r.grid)
        n = 1 + (r.neighbours if r.action in ("wait", "blocked") else 0)
        cost.runs += n
        if r.tuning:
            cost.tuning += n
            if r.group is not None:
                seeds.setdefault(r.group, set()).add((r.config or {}).get("seed"))
                extended[r.group] = extended.get(r.group, 0) + r.extension
                sample.setdefault(r.group, r)
        else:
            cost.judged += n
            if r.action == "wait" and r.group is not None:
                waiting.add(r.group)
        if r.work is not None:
            cost.tokens += n * r.work.tokens
            cost.flops += n * price.flops(r.work)
            cost.seconds += n * price.seconds(r.work)
    for group in waiting:
        run = sample.get(group)
        extra = max(0, bracket_cap * len(seeds.get(group, ())) - extended.get(group, 0))
        if run is None or run.work is None or not extra:
            continue
        cost = arm_of(run.grid)
        cost.bracketing_max += extra
        cost.bracketing_flops += extra * price.flops(run.work)
        cost.bracketing_seconds += extra * price.seconds(run.work)
    return sorted(costs.values(), key=lambda c: (c.arm is not None, c.arm.priority if c.arm else 0))


def within_budget(costs: list[ArmCost], gpu_hours: float, gpus: int = 1) -> tuple[list[ArmCost], list[ArmCost]]:
    """(kept, cut): the arms in priority order while their GPU-hours (bracketing's upper bound included) fit the
    budget; the first that does not fit, and every later one, are cut (a later, cheaper arm never jumps the queue:
    the priority is what the verdicts need first)."""
    kept, spent = [], 0.0
    for i, c in enumerate(costs):
        need = c.hours(gpus) + c.bracketing_hours(gpus)
        if spent + need > gpu_hours:
            return kept, costs[i:]
        kept.append(c)
        spent += need
    return kept, []


def trained_claims(experiment: str) -> list[str]:
    """The trained claims `experiment` tests (every one for `full`)."""
    from ffnbench.claims import CLAIMS

    return [c.id for c in CLAIMS if c.kind == "trained" and (experiment == "full" or c.experiment == experiment)]


def describe(experiment: str, costs: list[ArmCost], price: Price, sizes: Sequence[str], gpus: int,
             cut: list[ArmCost] | None = None, budget: float | None = None) -> list[str]:
    """The dry-run's cost lines: where the price comes from, a row per arm, the total, the factors per claim, and
    the cut arms."""
    kept = [c for c in costs if c not in (cut or [])]
    lines = [f"cost on the {price.gpu}:", *price.describe(sizes)]
    for c in costs:
        mark = "  CUT" if cut and c in cut else ""
        checks = f", checks {c.arm.checks}" if c.arm and c.arm.checks else ""
        lines.append(f"  arm {c.name}{checks}: {c.runs} runs ({c.tuning} tuning, {c.judged} judged) + up to "
                     f"{c.bracketing_max} bracketing; {c.tokens / 1e9:.2f}B tokens; {c.flops:.3g} FLOPs; "
                     f"{c.hours():.1f} GPU-h (+ up to {c.bracketing_hours():.1f}){mark}")
    hours = sum(c.hours() for c in kept)
    extra = sum(c.bracketing_hours() for c in kept)
    lines.append(f"  total: {sum(c.runs for c in kept)} runs (+ up to {sum(c.bracketing_max for c in kept)} "
                 f"bracketing); {sum(c.flops for c in kept):.3g} FLOPs; {hours:.1f} GPU-h (+ up to {extra:.1f} "
                 f"bracketing) on 1 GPU; {(hours + extra) / max(1, gpus):.1f} h on {gpus} GPU{'s' * (gpus != 1)} "
                 "(one job per GPU)")
    arms = [c.arm for c in kept if c.arm]
    factors = ", ".join(checked_factors(arms)) if arms else "lr only where the preset tunes it"
    lines.append(f"  checked on: {factors} — for {', '.join(trained_claims(experiment)) or 'no trained claim'}")
    if cut:
        left = [c.arm.checks for c in cut if c.arm and c.arm.checks]
        lines.append(f"  cut for the budget of {budget:g} GPU-h: {', '.join(c.name for c in cut)}; left unchecked: "
                     f"{', '.join(left) or 'nothing the kept arms do not check'} (the report's verdicts name every "
                     "factor left unchecked)")
    return lines
