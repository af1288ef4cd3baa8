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

from ffnbench.runs.result import RESULT_FILE
from ffnbench.training.readout import DEFER_ENV

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
    # The logged training loss is the global batch's, the mean over the ranks, as the one process logs it (rank 0's
    # half alone missed by 0.015 nats): the spikes read off it do not depend on the device count.
    assert [s for s, _ in ddp["train_curve"]] == [s for s, _ in finished[0].train_curve]
    assert [v for _, v in ddp["train_curve"]] == pytest.approx([v for _, v in finished[0].train_curve], abs=2e-3)
    assert ddp["metrics"]["final_train_loss"] == pytest.approx(finished[0].metrics["final_train_loss"], abs=2e-3)
    # the metrics the module all-reduces itself draw no advice to sync them
    assert "sync_dist" not in out.stderr


# Each rank counts, per training batch (from the previous batch's end to its own), the calls that would stop the host
# until a GPU's queue drains: reads of a tensor's value (.item(), .tolist(), float()) and torch.distributed.broadcast,
# whose result is read at once (Lightning's per-batch SIGTERM broadcast). Validation and checkpoints are not counted.
COUNT_HOST_SYNCS = """
import json, os
import lightning as L
import torch

_counts = {"reads": 0, "broadcasts": 0}
_on = [False]

def _counted(kind, original):
    def call(*args, **kwargs):
        if _on[0]:
            _counts[kind] += 1
        return original(*args, **kwargs)
    return call

for _name in ("item", "tolist", "__float__"):
    setattr(torch.Tensor, _name, _counted("reads", getattr(torch.Tensor, _name)))
torch.distributed.broadcast = _counted("broadcasts", torch.distributed.broadcast)

class _Hook(L.Callback):
    def _count(self):
        _counts.update(reads=0, broadcasts=0)
        _on[0] = True

    def on_train_start(self, trainer, module):
        self._count()

    def on_train_batch_end(self, trainer, *args):
        with open(os.environ["FFNBENCH_TEST_SYNCS"], "a") as f:
            f.write(json.dumps({"rank": trainer.global_rank, "step": trainer.global_step, **_counts}) + "\\n")
        self._count()

    def on_validation_start(self, trainer, *args):
        _on[0] = False

    def on_train_end(self, trainer, *args):
        _on[0] = False
"""


def test_a_ddp_training_batch_makes_no_host_sync_where_reads_are_deferred(cache_dir, tmp_path):
    """The GPU path (deferred reads) on two gloo ranks: no batch reads a value on the host, and Lightning's broadcast
    of rank 0's SIGTERM flag at every batch's start is gone (callbacks.PreemptionSignal agrees on a stop instead)."""
    log = tmp_path / "syncs.jsonl"
    out = run_cli(*MICRO, "trainer=ddp", "trainer.devices=2", "trainer.max_steps=20", "trainer.val_every=20",
                  "trainer.ckpt_every=20", f"data.cache_dir={cache_dir}", f"hydra.run.dir={tmp_path / 'ddp'}",
                  env={"PYTHONPATH": hook_pythonpath(tmp_path, COUNT_HOST_SYNCS), "FFNBENCH_TEST_SYNCS": str(log),
                       DEFER_ENV: "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    batches = [json.loads(line) for line in log.read_text().splitlines()]
    steps = [b["step"] for b in batches if b["rank"] == 0]
    assert steps == [b["step"] for b in batches if b["rank"] == 1] == list(range(5, 21, 5))  # 4 batches of 5 steps
    assert [b for b in batches if b["reads"] or b["broadcasts"]] == []


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
    reads deferred (the GPU path, forced here: training.readout) the ranks read the reduced flag at the next batch's
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


# three 2-process DDP runs each, a minute and more on 2 cores: the deferred case (the GPU path, which stops a batch of
# 5 steps later) runs in `make test`, the eager one in `make test-slow`
@pytest.mark.parametrize(("defer", "stop"), [pytest.param("0", 25, marks=pytest.mark.slow), ("1", 30)])
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
    assert f"stopped by SIGTERM at step {stop}" in stopped["error"] and stopped["status"] == "interrupted", stopped
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False, map_location="cpu")
    assert ckpt["global_step"] == stop
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = json.loads((tmp_path / "run" / RESULT_FILE).read_text())
    reference = json.loads((tmp_path / "whole" / RESULT_FILE).read_text())
    assert resumed["resumed_from_step"] == stop and resumed["status"] == "finished"
    assert resumed["metrics"]["final_val_loss"] == pytest.approx(reference["metrics"]["final_val_loss"], rel=1e-6)


# ---- DDP in a SLURM allocation, and the runs after a DDP run in one process ------------------------------------

SLURM_ONE_TASK = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "sweep", "SLURM_NODELIST": "localhost", "SLURM_JOB_ID": "123",
                  "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NNODES": "1"}


@pytest.mark.parametrize("launcher", [[], ["hydra/launcher=joblib", "hydra.launcher.n_jobs=1"]],
                         ids=["basic", "joblib"])
def test_a_two_job_ddp_sweep_inside_a_one_task_slurm_allocation_trains_both_jobs_on_two_processes(cache_dir, tmp_path,
                                                                                                 launcher):
    """`sbatch -n1 … make sweep` with trainer=ddp trainer.devices=2: Lightning's SLURM environment would claim the
    processes were made by SLURM and train one; and the second job of the process would find the first one's
    LOCAL_RANK/WORLD_SIZE and its process group. Both jobs train once, each on 2 processes, and say so — under the
    basic launcher and joblib's, one job at a time (joblib then runs both in one process, as a reused loky worker
    runs its jobs one after another)."""
    out = run_cli("-m", *MICRO, "trainer.max_steps=10", "trainer=ddp", "trainer.devices=2", "seed=0,1",
                  f"data.cache_dir={cache_dir}", f"runs_root={tmp_path / 'runs'}", "name=ddp_sweep", *launcher,
                  env=SLURM_ONE_TASK)
    assert out.returncode == 0, out.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in sorted((tmp_path / "runs" / "ddp_sweep").glob(f"*/{RESULT_FILE}"))]
    assert [r["seed"] for r in records] == [0, 1]
    for r in records:
        assert r["status"] == "finished", r.get("error")
        assert r["hardware"]["world_size"] == 2 and r["hardware"]["devices"] == 2
    assert out.stdout.count("ffnbench: finished") == 2  # each job trained once (rank 0 prints it)


def test_a_run_that_trains_on_fewer_processes_than_it_asked_for_fails_and_says_so(cache_dir, tmp_path):
    """The world-size check: a run whose cluster environment starts one process for trainer.devices=2 fails."""
    from ffnbench.training.callbacks import WorldSizeCheck

    class OneProcess:
        world_size = 1

    with pytest.raises(RuntimeError, match="asked for 2 processes .* and 1 started"):
        WorldSizeCheck(2).setup(OneProcess(), None, "fit")
    check = WorldSizeCheck(1)
    check.setup(OneProcess(), None, "validate")
    assert check.seen == 1


def test_a_sweep_with_a_failed_job_exits_non_zero_and_names_it(cache_dir, tmp_path):
    out = run_cli("-m", *MICRO, "trainer.max_steps=2", "data.final_val_tokens=1024", "optim.lr=0.001,-1",
                  f"data.cache_dir={cache_dir}", f"runs_root={tmp_path / 'runs'}", "name=one_fails")
    assert out.returncode == 1, out.stderr[-2000:]
    assert "1 job(s) of this sweep did not finish" in out.stderr and "optim.lr=-1" in out.stderr
    assert "refused before it started (no run folder)" in out.stderr  # a config error leaves no folder to read


def test_a_ddp_rank_above_zero_returns_at_once_when_another_process_holds_the_run(cache_dir, tmp_path, hold_run,
                                                                                 monkeypatch):
    """Only rank 0 takes the lock: a rank above 0 of a launch whose rank 0 found the run held elsewhere would wait in
    the process group's rendezvous until the c10d timeout, holding its GPU. It sees the holder is not its rank 0."""
    import time

    from micro_runs import micro

    from ffnbench.train import train

    run_dir = tmp_path / "held"
    hold_run(run_dir)
    for key, value in {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29411"}.items():
        monkeypatch.setenv(key, value)
    started = time.monotonic()
    result = train(micro(cache_dir, run_dir, "trainer=ddp", "trainer.devices=2"))
    assert result.status == "running"
    assert time.monotonic() - started < 20
