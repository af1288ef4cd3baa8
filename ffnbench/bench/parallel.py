"""The parallel-runs benchmark: on a CPU, is a sweep faster as one run at a time on every core, or as several
runs at once on a share of the cores each (the joblib launcher: placement.share_cpu_threads)? The same
`python -m ffnbench.train` run, once alone (torch's threads: one per core) and as `jobs` copies started together with
cores ÷ jobs threads each, interleaved; the ratios are taken per repetition, side by side. A CPU benchmark: on a GPU
the runs of a sweep queue for the device (placement.claim_devices), and it is skipped."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ffnbench.bench.render import median_iqr, speedup, table
from ffnbench.bench.session import BenchSession
from ffnbench.bench.timing import load_snapshot, quartiles

NAME = "parallel"
TITLE = "Parallel runs on a CPU"
SUMMARY = ("CPU: one run on every core against several runs at once on a share each (the joblib launcher): tokens/s "
           "and runs per hour as ratios against the run alone")


@dataclass(frozen=True)
class Sizes:
    """How much the parallel benchmark does: the run timed alone and as parallel jobs."""

    model: str
    steps: int
    batch: int
    jobs: int  # at most the machine's cores
    reps: int


FULL = Sizes(model="mini", steps=300, batch=16, jobs=2, reps=2)  # the CPU campaign's model
SIZES: Mapping[str, Sizes] = {"quick": Sizes(model="micro", steps=20, batch=4, jobs=2, reps=1), "gpu": FULL,
                              "cpu": FULL}


def _command(session: BenchSession, run_dir: Path) -> list[str]:
    s: Sizes = session.sizes[NAME]
    return [sys.executable, "-m", "ffnbench.train", f"model={s.model}", "ffn=gelu", "logger=csv",
            f"trainer.max_steps={s.steps}", "trainer.accelerator=cpu", "trainer.progress_bar=false",
            f"data.batch_size={s.batch}", f"data.val_tokens={session.val_tokens}",
            f"data.final_val_tokens={session.val_tokens}", f"data.cache_dir={session.cache_dir}",
            f"hydra.run.dir={run_dir}"]


def _launch(session: BenchSession, tag: str, jobs: int, threads: int | None) -> dict[str, Any]:
    """`jobs` runs started together (`threads` torch threads each; None: torch's default) → their wall time (start
    of the first to the end of the last) and each run's training tokens/s (its result.json)."""
    env = {**os.environ, "WANDB_MODE": "offline"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)  # torch's intra-op threads in a fresh process
    dirs = [session.work / f"parallel-{tag}-{i}" for i in range(jobs)]
    start = time.time()
    procs = [subprocess.Popen(_command(session, d), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for d in dirs]
    for p, d in zip(procs, dirs, strict=True):
        _, err = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise RuntimeError(f"{shlex.join(_command(session, d))} failed ({p.returncode}):\n{err[-3000:]}")
    wall = time.time() - start
    tps = [json.loads((d / "result.json").read_text())["throughput"]["tokens_per_s"] for d in dirs]
    return {"wall_s": wall, "tokens_per_s": tps}


def measure(session: BenchSession) -> dict[str, Any]:
    """The parallel record: settings, load, the run alone and the runs together (or why skipped), notes."""
    s: Sizes = session.sizes[NAME]
    cores = os.cpu_count() or 1
    jobs = max(1, min(s.jobs, cores))
    settings = {"model": s.model, "steps": s.steps, "batch": s.batch, "jobs": jobs,
                "threads_per_job": max(1, cores // jobs), "cores": cores, "reps": s.reps}
    load = {"before": load_snapshot()}
    if session.device.type != "cpu" or jobs < 2:
        why = "a GPU session: runs of a sweep queue for the device" if session.device.type != "cpu" else \
            "one core: nothing to share"
        return {"settings": settings, "load": load, "rows": [{"what": "skipped", "why": why}], "notes": [why]}
    # the token cache every run reads, built before anything is timed
    _launch(session, "warm", 1, None)
    alone, together = [], []
    for rep in range(s.reps):  # alternated, so drift of the machine hits both alike
        order = [("alone", 1, None), ("together", jobs, max(1, cores // jobs))]
        for name, n, threads in (order if rep % 2 == 0 else order[::-1]):
            (alone if name == "alone" else together).append(_launch(session, f"{name}-{rep}", n, threads))
    load["after"] = load_snapshot()
    tokens_ratio = [sum(t["tokens_per_s"]) / a["tokens_per_s"][0] for a, t in zip(alone, together, strict=True)]
    runs_ratio = [(jobs / t["wall_s"]) / (1 / a["wall_s"]) for a, t in zip(alone, together, strict=True)]
    rows = [
        {"what": f"1 run, {cores} threads", "jobs": 1, "threads": cores,
         "tokens_per_s_per_run": quartiles([a["tokens_per_s"][0] for a in alone]),
         "tokens_per_s_total": quartiles([a["tokens_per_s"][0] for a in alone]),
         "wall_s": quartiles([a["wall_s"] for a in alone])},
        {"what": f"{jobs} runs at once, {max(1, cores // jobs)} thread(s) each", "jobs": jobs,
         "threads": max(1, cores // jobs),
         "tokens_per_s_per_run": quartiles([x for t in together for x in t["tokens_per_s"]]),
         "tokens_per_s_total": quartiles([sum(t["tokens_per_s"]) for t in together]),
         "wall_s": quartiles([t["wall_s"] for t in together]),
         "tokens_per_s_ratio": quartiles(tokens_ratio), "runs_per_hour_ratio": quartiles(runs_ratio)},
    ]
    notes = [f"`python -m ffnbench.train model={s.model} ffn=gelu trainer.max_steps={s.steps}` "
             f"(batch {s.batch}); ratios per repetition against the run alone, median ± IQR/2 of "
             f"{s.reps}: tokens/s of all runs together ÷ tokens/s alone, and runs per hour (the wall time "
             "includes each process's start-up)",
             "the faster setting is what `make sweep LAUNCHER=joblib` gives on this machine: it runs as many jobs as "
             "cores by default, each on cores ÷ jobs threads (placement.share_cpu_threads)"]
    return {"settings": settings, "load": load, "rows": rows, "notes": notes}


def tables(record: Mapping[str, Any]) -> list[str]:
    """The run alone, then the runs together with their ratios against it (or why the benchmark was skipped)."""
    rows = record["rows"]
    if rows and rows[0].get("what") == "skipped":
        return [f"skipped: {rows[0]['why']}"]
    header = ["runs", "tokens/s per run", "tokens/s together", "wall s", "tokens/s ÷ alone", "runs/h ÷ alone"]
    return [table(header, [[r["what"], median_iqr(r["tokens_per_s_per_run"], ".3g"),
                            median_iqr(r["tokens_per_s_total"], ".3g"), median_iqr(r["wall_s"], ".3g"),
                            speedup(r.get("tokens_per_s_ratio")), speedup(r.get("runs_per_hour_ratio"))]
                           for r in rows])]
