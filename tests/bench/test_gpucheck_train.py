"""ffnbench.bench.gpucheck_train: gpu-check's judgements of a training run, on real dynamo and the CPU."""

import warnings
from types import SimpleNamespace

import torch

from ffnbench.bench import gpucheck_train as gt


def test_the_sync_watch_counts_every_sync_warning_of_the_timed_steps(monkeypatch):
    """The callback's logic with torch.cuda.set_sync_debug_mode stood in for (it needs CUDA): on after warm-up, off in
    validation and after the last step; each warning counted by where it was raised (every one, not once per line);
    the run's other warnings shown as usual."""
    modes = []
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    watch = gt.sync_watch(warmup_steps=10)
    trainer = SimpleNamespace(global_step=0, max_steps=30)
    shown = []
    monkeypatch.setattr(warnings, "showwarning", lambda message, *args, **kwargs: shown.append(str(message)))

    def sync_here():
        warnings.warn(f"called a synchronizing CUDA operation ({len(modes)})", UserWarning, stacklevel=1)

    watch.on_train_start(trainer, None)
    for step in (0, 10, 20):
        trainer.global_step = step
        watch.on_train_batch_start(trainer, None, None, 0)
        if modes and modes[-1] == "warn":
            sync_here()
            sync_here()  # the same line again: counted again
        trainer.global_step = step + 10
        watch.on_train_batch_end(trainer, None, None, None, 0)
        if step == 10:
            watch.on_validation_start(trainer, None)
            warnings.warn("not a sync", UserWarning, stacklevel=1)
    watch.on_train_end(trainer, None)
    summary = watch.summary()
    assert modes == ["warn", 0, "warn", 0]  # on from step 10, off in validation at 20, on, off at the last step
    assert summary["syncs"] == 4 and summary["steps"] == 20 and summary["per_step"] == 0.2
    assert summary["where"] == {f"{__file__}:{sync_here.__code__.co_firstlineno + 1}": 4}
    assert shown == ["not a sync"]


def test_a_fresh_dir_is_never_one_a_run_used(tmp_path):
    assert gt.fresh_dir(tmp_path, "small") == tmp_path / "small"
    (tmp_path / "small").mkdir()
    (tmp_path / "small-2").mkdir()
    assert gt.fresh_dir(tmp_path, "small") == tmp_path / "small-3"
