"""Signals: a run sent SIGTERM saves the step it was at and its rerun resumes from there; a submitit job signalled
before its time limit is requeued and resumes; Slurm jobs are requeued at their time limit."""

import json
import os
from pathlib import Path

import pytest
import torch
from micro_runs import MICRO, hook_pythonpath, run_cli

from ffnbench.runs.result import RESULT_FILE, RunResult

# Loaded by a Python process started with this folder on PYTHONPATH: at step $FFNBENCH_TEST_SIGTERM_AT the process
# sends itself $FFNBENCH_TEST_SIGNAL (SIGTERM by default), as a scheduler does when it pre-empts a job or its time is
# up (or SIGINT, as Ctrl-C in a terminal does).
SIGTERM_AT = """
import os, signal
import lightning as L

class _Hook(L.Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == int(os.environ["FFNBENCH_TEST_SIGTERM_AT"]):
            os.kill(os.getpid(), getattr(signal, os.environ.get("FFNBENCH_TEST_SIGNAL", "SIGTERM")))
"""


@pytest.mark.parametrize(("signal_name", "shown", "code"), [("SIGTERM", "SIGTERM", 143), ("SIGINT", "Ctrl-C", 130)])
def test_sigterm_mid_run_saves_that_step_and_the_rerun_resumes_from_it(finished, cache_dir, tmp_path, signal_name,
                                                                       shown, code):
    pythonpath = hook_pythonpath(tmp_path, SIGTERM_AT)
    args = [*MICRO, f"data.cache_dir={cache_dir}", f"hydra.run.dir={tmp_path / 'run'}"]
    out = run_cli(*args, env={"PYTHONPATH": pythonpath, "FFNBENCH_TEST_SIGTERM_AT": "25",
                              "FFNBENCH_TEST_SIGNAL": signal_name})
    assert out.returncode == code, out.stderr[-3000:]  # 128 + the signal, as a process ended by it
    assert "Detected KeyboardInterrupt" not in out.stdout + out.stderr and "Traceback" not in out.stderr
    stopped = json.loads((tmp_path / "run" / RESULT_FILE).read_text())
    line = (f"stopped by {shown} at step 25; checkpoint at step 25 ({tmp_path / 'run' / 'checkpoints' / 'last.ckpt'}): "
            "rerun the same command to resume")
    assert stopped["status"] == "interrupted" and stopped["error"] == line, stopped["error"]
    assert out.stderr.strip().splitlines()[-1] == f"ffnbench: run: {line}", out.stderr[-3000:]  # one line, the last
    ckpt = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False, map_location="cpu")
    assert ckpt["global_step"] == 25  # not 20, the last periodic checkpoint (trainer.ckpt_every=10)
    again = run_cli(*args)
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = RunResult.read(tmp_path / "run")
    assert resumed.status == "finished" and resumed.resumed_from_step == 25
    assert resumed.curve == finished[0].curve  # as if never stopped


@pytest.mark.slow
def test_a_submitit_job_signalled_before_its_time_limit_saves_is_requeued_and_resumes(finished, cache_dir, tmp_path,
                                                                                     monkeypatch):
    # A real local submitit job. submitit sends USR2 before a job's time limit (or on pre-emption); its handler
    # requeues the job. The run saves the step it was at first, and the requeued job resumes from there.
    submitit = pytest.importorskip("submitit")
    from submitit_job import TrainJob

    tests = str(Path(__file__).parents[1])  # submitit_job.py
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([tests, *filter(None, [os.environ.get("PYTHONPATH")])]))
    executor = submitit.AutoExecutor(folder=tmp_path / "submitit", cluster="local")
    executor.update_parameters(timeout_min=20)
    job = executor.submit(TrainJob([*MICRO, f"data.cache_dir={cache_dir}"], tmp_path / "run", signal_at=25))
    record = RunResult.from_json(job.result())
    assert record.status == "finished" and record.resumed_from_step == 25, job.stderr()
    assert record.curve == finished[0].curve
    assert "Caught signal SIGUSR2" in job.stderr() and "Requeued job" in job.stdout()  # by submitit, once saved


def test_slurm_jobs_that_reach_their_time_limit_are_requeued(tmp_path):
    from ffnbench.sweep.planning import plan

    _, cfg = plan("linear", "submitit_slurm", [f"runs_root={tmp_path}", "slurm.partition=gpu"])
    assert cfg.hydra.launcher.max_num_timeout == cfg.slurm.max_num_timeout > 0  # submitit's default, 0, never does
    assert cfg.hydra.launcher.signal_delay_s > 0  # time to save a checkpoint after the pre-emption signal
