"""gpu-check's training check: one compiled run of a sweep's shape through ffnbench.train.train(), as a sweep run
trains, watched for what would waste GPU-hours: a block that ran eager (a graph break, a frame dynamo gave up on),
a graph compiled after warm-up, a graph with a symbolic (dynamic) shape, more than one graph per compiled
function (validation runs eager; result.json's `compile`), host-device syncs hidden in the steps
(torch.cuda.set_sync_debug_mode, GPU only); and what a run pays besides its steps: start to first step, compile
seconds, a validation pass, a checkpoint."""

from __future__ import annotations

import time
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ffnbench.bench.compile_watch import compilation_ids, compilations, compile_summary, dynamo_watch, graph_problems
from ffnbench.bench.contenders import batch_shape
from ffnbench.bench.session import BenchSession
from ffnbench.training.throughput import sync


@dataclass(frozen=True)
class Shape:
    """One training run of gpu-check: what a sweep run trains (its model, batch, tokenizer and FFN), cut short.

    Args:
        label: its check row and its run folder (each run has a folder of its own).
        model: the model preset.
        batch: the global batch in sequences.
        extra: the other overrides that make it the sweep's run (tokenizer, vocabulary, FFN).
        steps: optimizer steps.
        warmup: steps before the compile watch and the sync count start (compiles belong in them).
        every: validation and checkpoint every this many steps: one of each mid-run, timed warm.
        group: the model group whose MFU and per-run overhead this run prices (None: not priced).
    """

    label: str
    model: str
    batch: int
    extra: tuple[str, ...] = ()
    steps: int = 300
    warmup: int = 20
    every: int = 150
    group: str | None = None

    def val_tokens(self) -> int:
        """Its validation set: one training batch, as a sweep run's sets are whole batches, so that its validation
        pass times what a sweep's does (validation runs eager: its shapes compile nothing)."""
        batch, seq_len = batch_shape(self.model, self.batch)
        return batch * seq_len


def train_overrides(session: BenchSession, shape: Shape, run_dir: Path, compile: bool) -> list[str]:
    """The command of a training check: the user's trainer for the session's device (trainer=gpu on a GPU), CSV
    logging, the shape, a validation set of one whole batch, one validation and checkpoint mid-run."""
    val_tokens = shape.val_tokens()
    return [f"model={shape.model}", *session.trainer_overrides(), "logger=csv", f"data.batch_size={shape.batch}",
            *shape.extra, f"data.val_tokens={val_tokens}", f"data.final_val_tokens={val_tokens}",
            f"data.cache_dir={session.cache_dir}", f"trainer.compile={str(compile).lower()}",
            f"trainer.max_steps={shape.steps}", f"trainer.val_every={shape.every}",
            f"trainer.ckpt_every={shape.every}", "trainer.progress_bar=false", f"run_dir={run_dir}"]


def fresh_dir(parent: Path, label: str) -> Path:
    """parent/label, or parent/label-2, -3, ...: a folder no earlier run of the session used (a run folder that
    holds another config's run is refused by train())."""
    path, n = parent / label, 1
    while path.exists():
        n += 1
        path = parent / f"{label}-{n}"
    return path


# ---- host-device syncs hidden in the training steps (GPU only) -------------------------------------------------

SYNC_MESSAGE = "called a synchronizing CUDA operation"  # torch.cuda.set_sync_debug_mode("warn")'s warning


def sync_watch(warmup_steps: int):
    """A Lightning callback that turns torch.cuda.set_sync_debug_mode("warn") on for the training steps after
    `warmup_steps` (off in validation and checkpoints, which read results on purpose) and counts the warnings, by
    where they were raised. A sync stalls the host until the GPU's queue drains: the logging step's one loss read
    is meant; any other is hidden cost. GPU only (a CUDA call)."""
    import lightning as L

    class SyncWatch(L.Callback):
        def __init__(self) -> None:
            self.where: Counter = Counter()
            self.steps = 0
            self._from_step: int | None = None
            self._on = False
            self._catch: Any = None
            self._log: list | None = None

        def _set(self, on: bool) -> None:
            if on != self._on:
                torch.cuda.set_sync_debug_mode("warn" if on else 0)
                self._on = on

        def on_train_start(self, trainer, pl_module) -> None:
            self._catch = warnings.catch_warnings(record=True)
            self._log = self._catch.__enter__()
            warnings.filterwarnings("always", message=f".*{SYNC_MESSAGE}")  # every one, not once per line

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            if self._from_step is None and trainer.global_step >= warmup_steps:
                self._from_step = trainer.global_step
            if self._from_step is not None:
                self._set(True)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if self._from_step is not None:
                self.steps = trainer.global_step - self._from_step
            if trainer.max_steps and trainer.global_step >= trainer.max_steps:
                self._set(False)  # the end-of-training checkpoint is no step's

        def on_validation_start(self, trainer, pl_module) -> None:
            self._set(False)

        def on_train_end(self, trainer, pl_module) -> None:
            self._close()

        def on_exception(self, trainer, pl_module, exception) -> None:
            self._close()

        def _close(self) -> None:
            self._set(False)
            if self._catch is None:
                return
            self._catch.__exit__(None, None, None)
            for w in self._log or []:
                if SYNC_MESSAGE in str(w.message):
                    self.where[f"{_short(w.filename)}:{w.lineno}"] += 1
                else:  # the run's other warnings, shown as they would have been
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)
            self._catch, self._log = None, None

        def summary(self) -> dict[str, Any]:
            total = sum(self.where.values())
            return {"mode": "torch.cuda.set_sync_debug_mode('warn'), training steps after warm-up",
                    "steps": self.steps, "syncs": total, "per_step": total / self.steps if self.steps else None,
                    "where": dict(self.where.most_common(8))}

    return SyncWatch()


def _short(filename: str) -> str:
    """A source path from its package on (…/site-packages/torch/x.py → torch/x.py)."""
    parts = Path(filename).parts
    for anchor in ("site-packages", "ffnbench"):
        if anchor in parts:
            i = parts.index(anchor)
            return "/".join(parts[i + 1:] if anchor == "site-packages" else parts[i:])
    return filename


# ---- what a run pays besides its training steps ---------------------------------------------------------------


def run_clock(device: torch.device, t0: float):
    """A Lightning callback that times a run's fixed costs, the device synchronized at each edge: start (`t0`, a
    perf_counter reading taken before train() was called) to the end of the first optimizer step, every
    validation pass (seconds and tokens) and every checkpoint written (seconds and bytes)."""
    import lightning as L

    class RunClock(L.Callback):
        def __init__(self) -> None:
            self.first_step_end: float | None = None  # perf_counter
            self.first_step_end_wall: float | None = None  # time.time(), as torch's compilation records
            self.val_passes: list[dict[str, Any]] = []
            self.checkpoints: list[dict[str, Any]] = []
            self._hook: Any = None
            self._val: list[float] = []
            self._wrapped = False

        def setup(self, trainer, pl_module, stage: str) -> None:
            if self._wrapped:
                return
            save = trainer.save_checkpoint

            def timed_save(filepath, *args, **kwargs):
                sync(device)
                start = time.perf_counter()
                out = save(filepath, *args, **kwargs)
                sync(device)
                size = Path(filepath).stat().st_size if Path(filepath).exists() else None
                self.checkpoints.append({"seconds": time.perf_counter() - start, "bytes": size,
                                         "step": trainer.global_step})
                return out

            trainer.save_checkpoint = timed_save  # this trainer only: the run's own saves, timed
            self._wrapped = True

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            if self.first_step_end is None and self._hook is None:
                def first_step_end(optimizer, args, kwargs) -> None:
                    sync(device)
                    self.first_step_end, self.first_step_end_wall = time.perf_counter(), time.time()
                    self._hook.remove()

                self._hook = trainer.optimizers[0].register_step_post_hook(first_step_end)

        def on_validation_start(self, trainer, pl_module) -> None:
            sync(device)
            self._val = [time.perf_counter(), 0]

        def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
            self._val[1] += int(batch[0].numel()) * trainer.world_size

        def on_validation_end(self, trainer, pl_module) -> None:
            sync(device)
            seconds = time.perf_counter() - self._val[0]
            self.val_passes.append({"step": trainer.global_step, "in_fit": trainer.state.fn == "fit",
                                    "seconds": seconds, "tokens": self._val[1]})

        def summary(self) -> dict[str, Any]:
            """start → first step; each validation pass; each checkpoint; the warm figures (the fastest validation
            per token, the median checkpoint)."""
            warm_val = max(self.val_passes, key=lambda v: v["tokens"] / v["seconds"], default=None)
            ckpt = sorted(c["seconds"] for c in self.checkpoints)
            return {"start_to_first_step_s": None if self.first_step_end is None else self.first_step_end - t0,
                    "val_passes": self.val_passes, "checkpoints": self.checkpoints,
                    "val_tokens_per_s": warm_val["tokens"] / warm_val["seconds"] if warm_val else None,
                    "checkpoint_s": ckpt[len(ckpt) // 2] if ckpt else None,
                    "checkpoint_bytes": self.checkpoints[0]["bytes"] if self.checkpoints else None}

    return RunClock()


# ---- the check ------------------------------------------------------------------------------------------------


def train_check(session: BenchSession, shape: Shape, compile: bool = True) -> dict[str, Any]:
    """One training run of `shape` as trainer=gpu trains it (compiled, a fresh dynamo as a fresh process has), in a
    folder of its own under <work>/train/: its status, tokens/s and MFU (the run's ThroughputMonitor, against the
    datasheet dense peak on a GPU), what went wrong with compilation (`problems`), hidden syncs per step (GPU),
    and its fixed costs (`clock`, `compile_record`). `compile=False` trains eager (the control flow's fast test):
    the compile judgements are then skipped, and say so."""
    from ffnbench.config.compose import compose
    from ffnbench.data import LMDataModule
    from ffnbench.train import train

    run_dir = fresh_dir(session.work / "train", shape.label)
    cfg = compose(train_overrides(session, shape, run_dir, compile))
    dm = LMDataModule(cfg.data, seq_len=int(cfg.model.seq_len), seed=int(cfg.seed))
    dm.prepare_data()  # tokenized (a BPE trained) before the clock starts: a sweep's runs find it cached
    watch = dynamo_watch(shape.warmup)
    syncs = sync_watch(shape.warmup) if session.gpu else None
    before = compilation_ids()
    started = time.perf_counter()
    clock = run_clock(session.device, started)
    result = train(cfg, callbacks=[watch, clock, *([syncs] if syncs else [])])
    seconds = time.perf_counter() - started
    thr = result.throughput or {}
    times = clock.summary()
    compiled = compile_summary(compilations(before), clock.first_step_end_wall)
    problems = []
    if result.status != "finished":
        problems.append(f"the run ended {result.status}: {result.error}")
    if compile:
        problems += watch.problems() + graph_problems(result.compile)
        if compiled["dynamic_graphs"]:
            problems.append(f"{compiled['dynamic_graphs']} graph(s) compiled with a symbolic (dynamic) shape, which "
                            f"no sweep run compiles: {', '.join(compiled['dynamic_where'])}")
    return {"label": shape.label, "model": shape.model, "group": shape.group, "run_dir": str(run_dir),
            "overrides": list(shape.extra), "batch_size": shape.batch, "steps": shape.steps,
            "warmup_steps": shape.warmup, "status": result.status, "compile": compile,
            "precision": result.hardware.get("precision"), "tokens_per_step": result.tokens_per_step,
            "tokens_per_s": thr.get("tokens_per_s"), "mfu": thr.get("mfu"), "peak_flops": thr.get("peak_flops"),
            "peak_source": thr.get("peak_source"), "final_val_loss": result.metric("final_val_loss"),
            "dynamo": watch.snapshots.get("end"), "compile_record": result.compile, "compilations": compiled,
            "sync_debug": syncs.summary() if syncs else "skipped: torch.cuda.set_sync_debug_mode is CUDA only",
            "clock": times, "problems": problems, "seconds": seconds}


def train_detail(row: dict[str, Any]) -> str:
    """A training row's line: what went wrong, or its throughput, MFU, hidden syncs and compile seconds."""
    if row["problems"]:
        return "; ".join(row["problems"])
    tps = f"{row['tokens_per_s']:,.0f} tokens/s" if row["tokens_per_s"] else "no throughput"
    mfu = f", MFU {row['mfu']:.3f} of {row['peak_flops']:.3g} FLOP/s" if row["mfu"] else ""
    sync_text = ""
    if isinstance(row["sync_debug"], dict) and row["sync_debug"]["per_step"] is not None:
        sync_text = f", {row['sync_debug']['per_step']:.2f} syncs/step"
    compiled = (f", {row['compilations']['compilations']} compilations in {row['compilations']['seconds']:.0f} s"
                if row["compile"] else ", eager (compile off: its judgements skipped)")
    return f"{row['status']}, {tps}{mfu}{sync_text}{compiled} ({row['seconds']:.0f} s)"
