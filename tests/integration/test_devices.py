"""GPU nodes and clusters, on the CPU: the record holds the resolved device and precision, a GPU rerun of a CPU
run is refused, a run already running elsewhere is skipped, deterministic algorithms on request."""

import json
import os
import platform
import shutil

import lightning as L
import pytest
import torch
from micro_runs import MICRO, micro

from ffnbench.config.compose import compose
from ffnbench.errors import RunDirError
from ffnbench.runs.rundir import RUN_CONFIG_FILE
from ffnbench.train import train


def test_the_record_holds_the_resolved_device_and_precision(finished):
    """trainer.accelerator and trainer.precision are stored as resolved, not as `auto`: in run_config.json, in the
    checkpoint's fingerprint and in result.json, where they decide the run's identity."""
    result, run_dir = finished[:2]
    assert compose(MICRO).trainer.precision == "auto"
    for config in (result.config, json.loads((run_dir / RUN_CONFIG_FILE).read_text()),
                   torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["ffnbench"]["fingerprint"]):
        assert (config["trainer"]["accelerator"], config["trainer"]["precision"]) == ("cpu", "32-true")
    assert (result.hardware["accelerator"], result.hardware["precision"]) == ("cpu", "32-true")


def test_a_gpu_rerun_of_a_finished_cpu_run_is_refused_not_skipped(finished, cache_dir, tmp_path, monkeypatch):
    run_dir = tmp_path / "copy"
    shutil.copytree(finished[1], run_dir)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_90"])
    with pytest.raises(RunDirError, match=r"trainer\.accelerator: 'cpu' → 'gpu'; trainer\.precision: '32-true' → "
                                          r"'bf16-mixed'"):
        train(micro(cache_dir, run_dir, "trainer.accelerator=auto"))
    assert train(micro(cache_dir, run_dir, "trainer.accelerator=cpu")).status == "finished"  # the CPU rerun skips
    assert not (run_dir / ".running").exists()


def test_a_run_already_running_elsewhere_is_skipped_with_a_message(cache_dir, tmp_path, hold_run, capsys):
    run_dir = tmp_path / "run"
    holder = hold_run(run_dir)
    result = train(micro(cache_dir, run_dir))
    assert result.status == "running" and result.run_dir == str(run_dir)
    out = capsys.readouterr().out
    assert f"ffnbench: run: already running on {platform.node()} (pid {holder.pid}" in out
    assert "skipped" in out
    assert [p.name for p in run_dir.iterdir()] == [".running"]  # the other process's run: nothing written


def test_deterministic_algorithms_on_request(cache_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", "")
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG")  # restored (absent) after the test
    seen = {}

    class Look(L.Callback):
        def on_train_start(self, trainer, module):
            seen["deterministic"] = torch.are_deterministic_algorithms_enabled()
            seen["cublas"] = os.environ.get("CUBLAS_WORKSPACE_CONFIG")

    try:
        result = train(micro(cache_dir, tmp_path / "det", "trainer.deterministic=true", "trainer.max_steps=2"),
                       callbacks=[Look()])
        assert seen == {"deterministic": True, "cublas": ":4096:8"} and result.status == "finished"
        assert result.config["trainer"]["deterministic"] is True
        train(micro(cache_dir, tmp_path / "not", "trainer.max_steps=2"), callbacks=[Look()])
        assert seen["deterministic"] is False  # the next run in the same process is not
    finally:
        torch.use_deterministic_algorithms(False)
