"""Launchers: a missing plugin is named, submitit's local executor gets the GPUs, and the launchers run a
micro sweep."""

import os

import pytest
import torch
from fixtures.sweep.runs import PLAIN_LINEAR, micro_args, results, run_sweep

from ffnbench.errors import ConfigError
from ffnbench.sweep import launchers, planning


def test_a_missing_launcher_plugin_names_the_package(monkeypatch):
    monkeypatch.setattr(launchers.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="needs the hydra-joblib-launcher package"):
        launchers.launcher_overrides("joblib")
    with pytest.raises(ConfigError, match="unknown launcher"):
        launchers.launcher_overrides("kubernetes")


def test_submitit_local_gets_the_gpus(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_90"])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    _, cfg = planning.plan("linear", "submitit_local", [f"runs_root={tmp_path}", *PLAIN_LINEAR])
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("LocalLauncher")
    assert (launcher.gpus_per_node, launcher.tasks_per_node, launcher.timeout_min) == (4, 1, cfg.slurm.timeout_min)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    runs, cfg = planning.plan("linear", "submitit_local", [f"runs_root={tmp_path}", *PLAIN_LINEAR])
    with pytest.raises(ConfigError, match=r"submitit_local gives its jobs GPUs 0\.\.n-1 .*'2,3'"):
        planning.check_plan(runs, cfg, "submitit_local", confirmed=False)


def test_submitit_local_launches_and_collects(tmp_path):
    out = run_sweep("linear", "--launcher", "submitit_local", "--", *micro_args(tmp_path), *PLAIN_LINEAR, "seed=0",
                    "ffn=gelu,swiglu", "hydra.launcher.timeout_min=10", tmp=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert {r["status"] for r in results(tmp_path, "linear").values()} == {"finished"}
    assert len(results(tmp_path, "linear")) == 2
    assert list((tmp_path / "runs" / "linear" / ".submitit").glob("*/*_result.pkl"))  # submitit collected them


@pytest.mark.slow  # minutes of end-to-end training on 2 cores; `make test-slow`
def test_joblib_runs_two_at_a_time(tmp_path):
    out = run_sweep("linear", "--launcher", "joblib", "--", *micro_args(tmp_path), *PLAIN_LINEAR, "seed=0",
                    "ffn=gelu,swiglu",
                    "hydra.launcher.n_jobs=2", tmp=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    done = results(tmp_path, "linear")
    assert len(done) == 2 and {r["status"] for r in done.values()} == {"finished"}
    assert {r["hardware"]["torch_threads"] for r in done.values()} == {max(1, (os.cpu_count() or 1) // 2)}


def test_a_slurm_dry_run_shows_the_job_arrays_it_would_submit():
    """Round 1's array holds the runs that can start now, later rounds the ones waiting on their tuning runs; the
    longest run is set against the time limit and its requeues."""
    from pathlib import Path

    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"slurm": {"partition": "gpu", "account": None, "qos": "high"},
                            "hydra": {"launcher": {"nodes": 1, "gpus_per_node": 2, "tasks_per_node": 2,
                                                   "cpus_per_task": 8, "mem_gb": 64, "timeout_min": 60,
                                                   "max_num_timeout": 2, "array_parallelism": 16}}})
    runs = [planning.PlannedRun([], Path(f"runs/x/r{i}"), action, flops=flops)
            for i, (action, flops) in enumerate([("start", 1e17), ("start", 3e17), ("resume", 1e17),
                                                 ("wait", 2e17), ("skip", 9e18)])]
    hour_per_1e17 = lambda run: run.flops / 1e17  # one GPU-hour per 1e17 FLOPs (None: a run it cannot price)
    lines = launchers.slurm_arrays(runs, cfg, hour_per_1e17)
    text = "\n".join(lines)
    assert "partition gpu, qos high" in lines[0] and "1 node × 2 GPU, 2 task/node" in lines[0]
    assert "time limit 60 min (requeued up to 2×" in lines[0]
    assert "round 1: one job array of 3 jobs, at most 16 running at once" in text
    assert "for the 1 runs waiting on their tuning runs" in text
    # the longest run not yet done: 3 GPU-hours over 2 GPUs = 90 min > 60, within 3 × 60 with its requeues
    assert "longest run ≈ 90 min on 2 GPU(s) (r1): needs requeues" in text
    cfg.hydra.launcher.timeout_min = 20
    assert "exceeds the time limit with every requeue" in "\n".join(launchers.slurm_arrays(runs, cfg, hour_per_1e17))
    assert not any("longest" in line for line in launchers.slurm_arrays(runs, cfg))  # not priced
