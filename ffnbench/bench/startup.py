"""The startup benchmark: command start → first training step of `python -m ffnbench.train` (a subprocess that
writes its step-time marks, callbacks.StepTimes), and data preparation: first tokenization vs cached load."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ffnbench.bench.render import goal, median_iqr, table
from ffnbench.bench.session import BenchSession
from ffnbench.bench.timing import interleaved, load_snapshot, quartiles
from ffnbench.tables import MISSING, fmt

NAME = "startup"
TITLE = "Startup"
SUMMARY = ("command start → first training step of `python -m ffnbench.train` (a subprocess), and data preparation: "
           "first tokenization vs cached load")
# What `make bench` aims for (docs/benchmarks.md); each row says whether it is met.
STARTUP_GOAL_S = 10.0  # command start → end of the first training step
CACHED_LOAD_GOAL_S = 1.0  # a prepared corpus, verified and memory-mapped

STARTUP_EVENTS = ("train_start", "data_ready", "first_step_start", "first_step_end", "exit")
LABELS = {"default": "python -m ffnbench.train (default loggers: CSV + wandb offline)",
          "csv": "python -m ffnbench.train logger=csv",
          "cold-cache": "python -m ffnbench.train logger=csv, empty data cache (tokenizes first)"}


@dataclass(frozen=True)
class Sizes:
    """How much the startup benchmark does."""

    model: str
    reps: int  # runs of each command
    data_reps: int  # repetitions of each data preparation


SIZES: Mapping[str, Sizes] = {
    "quick": Sizes(model="micro", reps=1, data_reps=1),
    "gpu": Sizes(model="tiny", reps=3, data_reps=3),
    "cpu": Sizes(model="tiny", reps=3, data_reps=3),
}


class StartupRun:
    """`python -m ffnbench.train <overrides>` in a subprocess; train() writes its timestamps to the file named by
    STEP_TIMES_ENV. Returns the seconds from just before the process is started to the end of its first
    training step; every event's offset is kept in `events`."""

    def __init__(self, session: BenchSession, name: str, overrides: list[str], cold_cache: bool = False):
        self.session, self.name, self.overrides, self.cold_cache = session, name, overrides, cold_cache
        self.events: list[dict[str, float]] = []
        self.n = 0

    def command(self, run_dir: Path, cache_dir: Path) -> list[str]:
        return [sys.executable, "-m", "ffnbench.train", *self.overrides, f"data.cache_dir={cache_dir}",
                f"hydra.run.dir={run_dir}"]

    def __call__(self) -> float:
        from ffnbench.training.callbacks import STEP_TIMES_ENV

        self.n += 1
        tag = f"startup-{self.name}-{self.n}"
        marks = self.session.work / f"{tag}.jsonl"
        cache = self.session.work / f"{tag}-cache" if self.cold_cache else self.session.cache_dir
        env = {**os.environ, STEP_TIMES_ENV: str(marks), "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"),
               "WANDB_SILENT": "true"}
        cmd = self.command(self.session.work / tag, cache)
        start = time.time()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        end = time.time()
        if proc.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        seen = {}
        for line in marks.read_text().splitlines():
            mark = json.loads(line)
            seen.setdefault(mark["event"], mark["time"] - start)
        seen["exit"] = end - start
        self.events.append(seen)
        return seen["first_step_end"]


def _data_config(overrides: list[str], cache: Path):
    from ffnbench.config.compose import compose

    return compose([*overrides, f"data.cache_dir={cache}"])


def _data_module(cfg):
    from ffnbench.data import LMDataModule

    return LMDataModule(cfg.data, seq_len=int(cfg.model.seq_len), seed=int(cfg.seed))


def _data_trial(session: BenchSession, overrides: list[str], cold: bool) -> Callable[[], float]:
    """prepare_data() + setup() of the data module, in this process: on an empty cache directory (tokenize and
    write the cache) or on the one the previous call built (verify and memory-map it)."""
    counter = iter(range(10**6))
    cached_dir = session.work / "data-cached"

    def load(cache: Path) -> tuple[float, bool]:
        cfg = _data_config(overrides, cache)
        start = time.perf_counter()
        dm = _data_module(cfg)
        dm.prepare_data()
        dm.setup("fit")
        return time.perf_counter() - start, bool(dm.info["from_cache"])

    if not cold:
        load(cached_dir)  # the cache the cached trials read, built outside the timing

    def trial() -> float:
        cache = session.work / f"data-cold-{next(counter)}" if cold else cached_dir
        seconds, from_cache = load(cache)
        if from_cache is cold:
            raise RuntimeError(f"data benchmark: expected {'a build' if cold else 'a cache hit'} in {cache}")
        return seconds

    return trial


def _run_row(run: StartupRun, values: list[float], model: str) -> dict[str, Any]:
    events = {e: quartiles([ev[e] for ev in run.events if e in ev]) for e in STARTUP_EVENTS
              if any(e in ev for ev in run.events)}
    to_first_step = quartiles(values)
    return {"what": run.name, "command": LABELS[run.name] + f" model={model} trainer.max_steps=1",
            "to_first_step_s": to_first_step, "events_s": events, "raw": run.events,
            "goal_s": STARTUP_GOAL_S, "meets_goal": to_first_step["median"] <= STARTUP_GOAL_S}


def measure(session: BenchSession) -> dict[str, Any]:
    """The startup record: settings, load, one row per command, the data-preparation rows, notes."""
    s: Sizes = session.sizes[NAME]
    base = [f"model={s.model}", "trainer.max_steps=1"]
    # the token cache the "cached" runs must find, built before anything is timed
    _data_module(_data_config([f"model={s.model}"], session.cache_dir)).prepare_data()
    load = {"before": load_snapshot()}
    runs = [StartupRun(session, "csv", [*base, "logger=csv"])]
    if not session.quick:
        runs.insert(0, StartupRun(session, "default", base))  # the default loggers: CSV and wandb (offline)
    results = interleaved({r.name: r for r in runs}, s.reps)
    cold = StartupRun(session, "cold-cache", [*base, "logger=csv"], cold_cache=True)
    cold_result = [cold()] if not session.quick else []

    data_overrides = [f"model={s.model}"]
    build = _data_trial(session, data_overrides, cold=True)
    first_in_process = build()  # the first build in this process also pays one-time imports (datasets)
    data = interleaved({"tokenize": build, "cached": _data_trial(session, data_overrides, cold=False)}, s.data_reps)
    load["after"] = load_snapshot()

    rows = [_run_row(run, values, s.model)
            for run, values in [*((r, results[r.name]) for r in runs), *([(cold, cold_result)] if cold_result else [])]]
    cached = quartiles(data["cached"])
    data_rows = [
        {"what": "first tokenization in a fresh process (one-time imports included)",
         "seconds": quartiles([first_in_process])},
        {"what": "tokenization (empty cache)", "seconds": quartiles(data["tokenize"])},
        {"what": "cached load (verify + memory-map)", "seconds": cached,
         "goal_s": CACHED_LOAD_GOAL_S, "meets_goal": cached["median"] <= CACHED_LOAD_GOAL_S},
    ]
    notes = [f"times from just before the process is started; median ± IQR/2 of {s.reps} interleaved runs "
             f"(cold cache: 1 run); no compile; model={s.model}, cached data unless stated",
             "data: LMDataModule.prepare_data() + setup() of data=shakespeare (bytes), timed in this process; "
             f"{s.data_reps} interleaved repetitions after the first (which pays the imports)"]
    settings = {"model": s.model, "reps": s.reps, "data_reps": s.data_reps,
                "overrides": {r.name: r.overrides for r in [*runs, cold]}, "wandb_mode": "offline",
                "device": "trainer=auto (this machine's default)"}
    return {"settings": settings, "load": load, "rows": rows, "data": data_rows, "notes": notes}


def tables(record: Mapping[str, Any]) -> list[str]:
    """The commands' events (median seconds from the process start), then the data preparations."""
    def event(r: Mapping[str, Any], e: str) -> str:
        return fmt(r["events_s"][e]["median"], ".2f") if e in r["events_s"] else MISSING

    def goal_cell(r: Mapping[str, Any]) -> str:
        return goal(r["meets_goal"], f"≤ {r['goal_s']:g} s") if "goal_s" in r else ""

    commands = table(
        ["command", "train() entered s", "data ready s", "first step starts s", "first step done s", "exit s",
         "goal"],
        [[r["what"], event(r, "train_start"), event(r, "data_ready"), event(r, "first_step_start"),
          median_iqr(r["to_first_step_s"], ".2f"), event(r, "exit"), goal_cell(r)] for r in record["rows"]])
    data = table(["data preparation (in process)", "seconds", "goal"],
                 [[r["what"], median_iqr(r["seconds"], ".3f"), goal_cell(r)] for r in record["data"]])
    return [commands, data]
