"""Where the pipeline's time per step goes beyond the hand loop's: cProfile over the same steps of each, and the
functions the pipeline calls beyond the hand loop's, ranked by their own time (the overhead benchmark's profile)."""

from __future__ import annotations

import cProfile
import pstats
import re
from typing import Any

from ffnbench.bench.contenders import HandLoop, data_batches, pipeline_overrides, quiet, run_train, whole_batches
from ffnbench.bench.session import BenchSession


def _function_name(key: tuple[str, int, str]) -> str:
    """'lightning/pytorch/trainer/call.py:203 _call_callback_hooks': a profiled function, its path from the package
    root (site-packages, the standard library, this repository)."""
    file, line, name = key
    if file == "~":
        return name
    short = re.sub(r"^.*/(site-packages|lib/python3\.\d+)/", "", file)
    if short == file and "/ffnbench/" in file:
        short = "ffnbench/" + file.rsplit("/ffnbench/", 1)[1]
    return f"{short}:{line} {name}"


def _stats_by_function(profile: cProfile.Profile, steps: int) -> tuple[dict[str, tuple[float, float]], float]:
    """{function: (calls per step, own ms per step)} and the calls per step in all."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    out: dict[str, tuple[float, float]] = {}
    for key, (_, calls, own, _, _) in stats.items():
        name = _function_name(key)
        c, t = out.get(name, (0.0, 0.0))
        out[name] = (c + calls / steps, t + 1e3 * own / steps)
    return out, sum(c for c, _ in out.values())


def profile(session: BenchSession, model: str, steps: int, top: int = 12,
            batch: int | None = None) -> dict[str, Any]:
    """Where the pipeline's time per step goes beyond the hand loop's: cProfile over `steps` steps of each (after
    warm-up): Python calls per step of each, and the functions with the most own time in the calls the pipeline
    makes beyond the hand loop's (a function both make as often, a kernel say, is shared work: its time differs by
    noise alone). The profiler adds about the same time to every Python call, so read the times as shares of the
    overhead, not as durations; the call counts are exact.

    Args:
        session: the device, and the work folder the run goes under.
        model: a model preset (conf/model/).
        steps: steps profiled, rounded up to whole batches (trainer.inner_steps), after a tenth as many of warm-up.
        top: how many functions the record lists.
        batch: the global batch (None: the user's).
    """
    import lightning as L

    from ffnbench.config.compose import compose

    overrides = pipeline_overrides(session, model, batch)
    _, warmup, steps = whole_batches(overrides, max(5, steps // 10), steps)  # profiled from a batch's end to one
    cfg = compose([*overrides, f"trainer.max_steps={warmup + steps}", f"run_dir={session.work / 'profile'}"])

    class Window(L.Callback):
        def __init__(self) -> None:
            self.profile = cProfile.Profile()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if trainer.global_step == warmup:
                self.profile.enable()
            elif trainer.global_step == warmup + steps:
                self.profile.disable()

    window = Window()
    with quiet():
        run_train(cfg, [window])
    loop = HandLoop(session, cfg, batches=data_batches(cfg, int(cfg.model.seq_len), pin=session.gpu),
                    compile=bool(cfg.trainer.compile), compile_mode=str(cfg.trainer.compile_mode))
    for _ in range(warmup):
        loop.step()
    hand_profile = cProfile.Profile()
    hand_profile.enable()
    for _ in range(steps):
        loop.step()
    hand_profile.disable()
    pipe, pipe_calls = _stats_by_function(window.profile, steps)
    hand, hand_calls = _stats_by_function(hand_profile, steps)
    beyond = {name: (calls - hand.get(name, (0.0, 0.0))[0], own * (1 - hand.get(name, (0.0, 0.0))[0] / calls))
              for name, (calls, own) in pipe.items() if calls > hand.get(name, (0.0, 0.0))[0]}
    ranked = sorted(beyond, key=lambda name: beyond[name][1], reverse=True)
    return {
        "model": model, "batch_size": int(cfg.data.batch_size), "steps": steps,
        "pipeline_calls_per_step": pipe_calls, "hand_calls_per_step": hand_calls,
        "beyond_hand_own_ms_per_step": sum(own for _, own in beyond.values()),
        "top_beyond_hand": [{"function": name, "calls_per_step": beyond[name][0], "own_ms_per_step": beyond[name][1]}
                            for name in ranked[:top]],
    }
