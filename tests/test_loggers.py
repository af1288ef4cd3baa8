"""Loggers: wandb's mode follows the credentials, and a resumed run's metrics.csv keeps its rows."""

import csv
from pathlib import Path

import pytest

from ffnbench.errors import ConfigError
from ffnbench.ffn import FFNSpec
from ffnbench.loggers import RunCSVLogger, wandb_mode, wandb_run_id, wandb_tags


def test_wandb_is_offline_without_credentials(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert wandb_mode("auto") == "offline"
    (tmp_path / ".netrc").write_text("machine api.wandb.ai login user password secret\n")
    (tmp_path / ".netrc").chmod(0o600)
    assert wandb_mode("auto") == "online"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert wandb_mode(None) == "online"
    assert wandb_mode("offline") == "offline"
    with pytest.raises(ConfigError, match="logger.wandb.mode"):
        wandb_mode("sometimes")


def test_wandb_run_id_is_stable_per_run_dir():
    # sha1 of the resolved path: the same directory gives the same id in any process, so a resume continues it
    assert wandb_run_id(Path("/runs/quick/gelu-b4-nobias-s0")) == "72f93194b88fbba4"
    assert wandb_run_id(Path("/runs/quick/./relu-b4-nobias-s0")) == "ec65cc038cfaec99"


def test_wandb_tags_say_the_ffn_size_and_seed():
    config = {"model": {"name": "tiny"}, "seed": 2}
    assert wandb_tags(config, FFNSpec("swiglu", budget=8 / 3, bias=True)) == [
        "act:swiglu", "budget:2.66667", "bias:on", "size:tiny", "seed:2"]
    assert wandb_tags({"model": {}, "seed": 0}, FFNSpec("relu", width=4))[1:4] == ["width:4", "bias:off", "size:custom"]


def rows(path):
    with path.open() as f:
        return list(csv.DictReader(f))


def test_a_resumed_run_keeps_its_rows_up_to_the_checkpoint(tmp_path):
    first = RunCSVLogger(tmp_path)
    for step in range(5):
        first.log_metrics({"train/loss": 5.0 - step}, step=step)
    first.log_metrics({"val/loss": 4.0}, step=4)
    first.save()
    resumed = RunCSVLogger(tmp_path, resume_step=2)  # the checkpoint was at step 2; steps 3-4 are redone
    resumed.log_metrics({"train/loss": 1.0, "lr": 0.1}, step=3)
    resumed.save()
    kept = rows(tmp_path / "metrics.csv")
    assert [r["step"] for r in kept] == ["0", "1", "2", "3"]
    assert set(kept[0]) == {"step", "train/loss", "val/loss", "lr"}  # old and new columns both kept


def test_a_fresh_run_starts_a_new_file(tmp_path):
    (tmp_path / "metrics.csv").write_text("step,train/loss\n0,9.0\n")
    logger = RunCSVLogger(tmp_path)
    logger.log_metrics({"train/loss": 1.0}, step=0)
    logger.save()
    assert rows(tmp_path / "metrics.csv") == [{"step": "0", "train/loss": "1.0"}]
