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
