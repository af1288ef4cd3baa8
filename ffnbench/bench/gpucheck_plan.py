"""What one `make gpu-check` does (a Plan): the GPU sweeps' own shapes it trains, the overhead run's shape and
steps, the DDP run, the sweep runs it prices; on a GPU (gpu_plan) or, at micro scale, on the CPU (smoke_plan)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import ffnbench.bench.alignment as alignment
from ffnbench.bench.cli import sizes_for
from ffnbench.bench.gpucheck_price import PRICE_EXPERIMENT
from ffnbench.bench.gpucheck_train import Shape

SWEEP_EXPERIMENT = PRICE_EXPERIMENT  # a GPU claim experiment: what its runs train is what gpu-check trains
GELU, SWIGLU = ("ffn=gelu", "ffn.budget=4"), ("ffn=swiglu", "ffn.budget=4")  # as the experiment compares them


@dataclass(frozen=True)
class Plan:
    """What one gpu-check does.

    Args:
        mode: gpu (the real check), quick (a short one on a GPU) or cpu-smoke (its control flow on the CPU).
        shapes: the training checks, in order.
        compare: the overhead check's shape, timed as (warm-up steps, steps per window, windows).
        compare_steps: those steps.
        ddp_steps: the DDP check's steps.
        price_runs: model group → the overrides of the sweep run of `SWEEP_EXPERIMENT` it prices.
        sizes: the benchmarks' sizes (BenchSession.sizes; the alignment benchmark's are used).
        compile: compile the blocks (False only in the control flow's fast test, on a CPU).
        substitutions: what this plan does instead of the GPU's check, each said in the record.
    """

    mode: str
    shapes: tuple[Shape, ...]
    compare: Shape
    compare_steps: tuple[int, int, int]
    ddp_steps: int
    price_runs: dict[str, list[str]]
    sizes: dict[str, Any] = field(default_factory=dict)
    compile: bool = True
    substitutions: tuple[str, ...] = ()


def sweep_shapes(experiment: str = SWEEP_EXPERIMENT, quick: bool = False) -> tuple[Shape, ...]:
    """The shapes the GPU sweeps train, read from the composed experiment (conf/experiment/_gpu.yaml): its model
    (small), the size arm's base, its tokenizer and vocabulary (where the tied head and the loss weigh) and its batch
    size; on Shakespeare, which needs no download, its BPE trained offline. small and base price their groups; small
    with SwiGLU checks a gated FFN compiles as cleanly. `quick`: fewer steps."""
    from ffnbench.config.compose import compose

    cfg = compose([f"experiment={experiment}"])
    model, batch = str(cfg.model.name), int(cfg.data.batch_size)
    data = (f"data.tokenizer={cfg.data.tokenizer}", f"data.vocab_size={cfg.data.vocab_size}")
    if quick:
        steps = {"small": (60, 10, 30), "base": (40, 10, 20), "swiglu": (40, 10, 20)}
    else:  # every: one validation and checkpoint mid-run, timed warm; base's steps are ~10x small's
        steps = {"small": (300, 20, 150), "base": (120, 20, 60), "swiglu": (150, 20, 80)}
    return (Shape(model, model, batch, (*data, *GELU), *steps["small"], group=model),
            Shape("base", "base", batch, (*data, *GELU), *steps["base"], group="base"),
            Shape(f"{model}-swiglu", model, batch, (*data, *SWIGLU), *steps["swiglu"]))


def gpu_plan(quick: bool = False) -> Plan:
    """The real check (`quick`: a short one): the sweeps' shapes, the overhead at the small one, C9, DDP."""
    shapes = sweep_shapes(quick=quick)
    sizes = sizes_for(True, True) if quick else check_sizes()
    return Plan("quick" if quick else "gpu", shapes, shapes[0], (10, 20, 4) if quick else (20, 50, 10),
                40 if quick else 100, {s.group: [f"model={s.model}", *GELU] for s in shapes if s.group}, sizes)


def smoke_plan(compile: bool = True, steps: int = 40) -> Plan:
    """gpu-check's control flow on the CPU at micro scale: the three training checks on micro models standing for
    the sweep's shapes (byte tokens, batch 8: no BPE to train), each in its folder, `steps` steps (a multiple of
    20: a validation and a checkpoint mid-run); the overhead at micro; the alignment at its quick sizes; DDP on 2
    gloo processes. `compile=False` trains eager (the control flow's fast test)."""
    every = steps // 2
    shapes = (Shape("small", "micro", 8, GELU, steps, 10, every, group="small"),
              Shape("base", "micro", 8, ("model.n_layer=3", *GELU), steps, 10, every, group="base"),
              Shape("small-swiglu", "micro", 8, SWIGLU, steps, 10, every))
    subs = ["micro models (2 and 3 layers, byte tokens, batch 8) stand for the sweep's small and base",
            "MFU against the CPU's probed fp32 peak, not a GPU's datasheet peak",
            "host-device syncs not counted (torch.cuda.set_sync_debug_mode is CUDA only)",
            "DDP on 2 CPU processes (gloo), not 2 GPUs",
            "the price block is computed from micro figures: not a price (its gpu is null)"]
    if not compile:
        subs.append("eager (compile off): the compile judgements are skipped")
    return Plan("cpu-smoke", shapes, shapes[0], (10, 10, 2), 20,
                {"small": ["model=small", *GELU], "base": ["model=base", *GELU]}, sizes_for(True, False), compile,
                tuple(subs))


def check_sizes() -> dict[str, Any]:
    """The benchmarks' sizes in gpu-check (BenchSession.sizes): `make bench`'s GPU sizes, the alignment benchmark's
    repetitions cut to fit the time budget."""
    full = sizes_for(False, True)
    return {**full, alignment.NAME: dataclasses.replace(full[alignment.NAME], reps=9)}
