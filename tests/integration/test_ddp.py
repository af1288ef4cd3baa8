"""DDP on the CPU, two processes: each rank trains on half of every batch of the one-process run, a non-finite
loss on one rank stops every rank at one step, ranks signalled apart stop together and resume."""

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
import torch
from micro_runs import MICRO, hook_pythonpath, run_cli

from ffnbench.readout import DEFER_ENV
from ffnbench.result import RESULT_FILE

# Loaded by every Python process started with this folder on PYTHONPATH (the DDP launcher's child included): each
# rank appends the rows of every training batch it receives to $FFNBENCH_TEST_BATCHES, one JSON line per batch.
RECORD_BATCHES = """
import json, os
import lightning as L

class _Hook(L.Callback):
    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        with open(os.environ["FFNBENCH_TEST_BATCHES"], "a") as f:
            for i, x in enumerate(batch[0].tolist()):  # the batches of trainer.inner_steps steps, stacked
                if trainer.global_step + i < trainer.max_steps:
                    f.write(json.dumps({"rank": trainer.global_rank, "step": trainer.global_step + i,
                                        "rows": x}) + "\\n")
"""


def test_ddp_ranks_each_train_on_half_of_every_batch(finished, cache_dir, tmp_path):
    pythonpath = hook_pythonpath(tmp_path, RECORD_BATCHES)
    log = tmp_path / "batches.jsonl"
    out = run_cli(*MICRO, "trainer=ddp", "trainer.devices=2", f"data.cache_dir={cache_dir}",
                  f"hydra.run.dir={tmp_path / 'ddp'}",
                  env={"PYTHONPATH": pythonpath, "FFNBENCH_TEST_BATCHES": str(log)})
    assert out.returncode == 0, out.stderr[-3000:]
    ddp = json.loads((tmp_path / "ddp" / RESULT_FILE).read_text())
    assert ddp["hardware"]["devices"] == 2 and ddp["hardware"]["strategy"] == "ddp"

    seen: dict[int, dict[int, list]] = {0: {}, 1: {}}  # rank -> step -> rows
    for line in log.read_text().splitlines():
        batch = json.loads(line)
        assert batch["step"] not in seen[batch["rank"]], "a rank trained twice on one step"
        seen[batch["rank"]][batch["step"]] = [tuple(row) for row in batch["rows"]]
    single = finished[2]  # step -> the 8 rows the one-process run trained on
    for rank in (0, 1):
        assert sorted(seen[rank]) == list(range(40)), f"rank {rank} missed steps"
        assert all(len(rows) == 4 for rows in seen[rank].values()), f"rank {rank} did not get half of each batch"
    for step, rows in single.items():  # the two halves are the one-process batch, no row lost or doubled
        assert Counter(seen[0][step]) + Counter(seen[1][step]) == Counter(rows), step
    # Same batches, gradients averaged over two halves: equal up to float summation order.
    assert ddp["metrics"]["final_val_loss"] == pytest.approx(finished[0].metrics["final_val_loss"], abs=1e-3)
    # Each rank validated its half of the final windows: gathered in rank order, they are the windows in order.
    assert ddp["val_windows"] == pytest.approx(finished[0].val_windows, abs=1e-3)


# Rank 1's training loss is +inf at logging step 19 only (rank 0's is finite): a rank-specific overflow.
INF_ON_RANK_1 = """
import lightning as L

class _Hook(L.Callback):
    def on_train_start(self, trainer, module):
        if trainer.global_rank != 1:
            return
        forward = module.model.forward

        def poisoned(idx, targets=None, **kwargs):
            out = forward(idx, targets, **kwargs)
            poison = module.training and targets is not None and trainer.global_step == 19  # training, not validation
            return out + float("inf") if poison else out

        module.model.forward = poisoned
"""


@pytest.mark.parametrize(("defer", "stop"), [("0", 19), ("1", 20)])
def test_a_non_finite_loss_on_one_rank_stops_every_rank_at_the_same_step(cache_dir, tmp_path, defer, stop):
    """Without agreeing, rank 1 would return before its backward while rank 0 waited in the all-reduce: a hang. With
    reads deferred (the GPU path, forced here: ffnbench.readout) the ranks read the reduced flag at the next batch's
    start, after step 19's update: they stop at step 20."""
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONPATH": hook_pythonpath(tmp_path, INF_ON_RANK_1),
           DEFER_ENV: defer}
    try:
        out = subprocess.run([sys.executable, "-m", "ffnbench.train", *MICRO, "trainer=ddp", "trainer.devices=2",
                              f"data.cache_dir={cache_dir}", f"hydra.run.dir={tmp_path / 'ddp'}"],
                             capture_output=True, text=True, env=env, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail("the DDP run hung: the ranks did not stop at the same step")
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads((tmp_path / "ddp" / RESULT_FILE).read_text())
    assert result["status"] == "diverged" and result["steps"] == stop
    assert result["error"] == "training loss became non-finite on 1 of 2 ranks at step 19"


# Under DDP: rank 0 gets SIGTERM at the end of step 25's batch, rank 1 a few milliseconds later, as a scheduler's
# signal reaches the tasks of one job.
SIGTERM_STAGGERED = """
import os, signal, threading
import lightning as L

class _Hook(L.Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == 25:
            delay = 0.0 if trainer.global_rank == 0 else 0.005
            threading.Timer(delay, os.kill, (os.getpid(), signal.SIGTERM)).start()
"""


@pytest.mark.slow  # three 2-process DDP runs: a minute and more on 2 cores; `make test-slow`
@pytest.mark.parametrize(("defer", "stop"), [("0", 25), ("1", 30)])  # deferred (the GPU path): a batch (5 steps) later
def test_ddp_ranks_signalled_apart_stop_at_one_step_and_the_resumed_run_equals_an_uninterrupted_one(cache_dir,
                                                                                                   tmp_path, defer,
                                                                                                   stop, monkeypatch):
    monkeypatch.setenv(DEFER_ENV, defer)
    ddp = [*MICRO, "trainer=ddp", "trainer.devices=2", f"data.cache_dir={cache_dir}"]
    whole = run_cli(*ddp, f"hydra.run.dir={tmp_path / 'whole'}")
    assert whole.returncode == 0, whole.stderr[-3000:]
    args = [*ddp, f"hydra.run.dir={tmp_path / 'run'}"]
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONPATH": hook_pythonpath(tmp_path, SIGTERM_STAGGERED)}
    try:
        out = subprocess.run([sys.executable, "-m", "ffnbench.train", *args], capture_output=True, text=True, env=env,
                             timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail("the ranks did not stop together: a rank waited in a collective the other never reached")
    assert out.returncode == 143, out.stderr[-3000:]
    stopped = json.loads((tmp_path / "run" / RESULT_FILE).read_text())
    assert f"stopped by SIGTERM at step {stop}" in stopped["error"], stopped["error"]
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False, map_location="cpu")
    assert ckpt["global_step"] == stop
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = json.loads((tmp_path / "run" / RESULT_FILE).read_text())
    reference = json.loads((tmp_path / "whole" / RESULT_FILE).read_text())
    assert resumed["resumed_from_step"] == stop and resumed["status"] == "finished"
    assert resumed["metrics"]["final_val_loss"] == pytest.approx(reference["metrics"]["final_val_loss"], rel=1e-6)
