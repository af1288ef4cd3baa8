"""Training end to end on the CPU with the micro model: the loss falls, the record is complete and exact to
rerun, resume equals an uninterrupted run, divergence is caught, compile and DDP agree, bad input is refused."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from wandb_files import run_info

from ffnbench.config import compose
from ffnbench.errors import ConfigError, DataError, RunDirError
from ffnbench.records import RESULT_FILE, RUN_CONFIG_FILE
from ffnbench.train import train

MICRO = [
    "model=micro",
    "logger=csv",
    "data.batch_size=8",
    "data.val_tokens=1024",
    "trainer.max_steps=40",
    "trainer.val_every=10",
    "trainer.ckpt_every=10",
    "trainer.log_every=5",
    "trainer.progress_bar=false",
    "trainer.accelerator=cpu",
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


def micro(cache_dir, run_dir, *extra):
    return compose([*MICRO, f"data.cache_dir={cache_dir}", f"run_dir={run_dir}", *extra])


@pytest.fixture(scope="module")
def finished(cache_dir, tmp_path_factory):
    """One uninterrupted micro run that several tests compare against."""
    run_dir = tmp_path_factory.mktemp("runs") / "reference"
    return train(micro(cache_dir, run_dir)), run_dir


def test_micro_model_trains_and_the_loss_falls(finished):
    result, _run_dir = finished
    assert result["status"] == "finished" and result["error"] is None
    m = result["metrics"]
    assert m["init_val_loss"] == pytest.approx(math.log(256), abs=0.3)  # uniform over bytes at init
    assert m["final_val_loss"] < m["init_val_loss"] - 1.0
    assert [c["step"] for c in result["curve"]] == [0, 10, 20, 30, 40]
    assert m["final_val_bpb"] == pytest.approx(m["final_val_loss"] / math.log(2))  # bytes: 1 byte per token


def test_result_json_has_every_field(finished):
    result, run_dir = finished
    on_disk = json.loads((run_dir / RESULT_FILE).read_text())
    assert on_disk == json.loads(json.dumps(result))
    for key in ("status", "config", "ffn", "model", "params", "flops", "seed", "data", "metrics", "ffn_stats",
                "curve", "tokens", "steps", "wall_time_s", "throughput", "versions", "git", "hardware"):
        assert key in result, key
    assert set(result["ffn"]) >= {"nominal_d_ff", "d_ff", "budget_mismatch", "params_per_layer"}
    assert set(result["params"]) >= {"total", "non_embedding", "ffn_total", "ffn_per_layer"}
    assert result["flops"]["per_token_training"] > 0
    assert result["tokens"] == 40 * 8 * 32
    for when in ("init", "final"):
        stats = result["ffn_stats"][when]
        assert set(stats["mean"]) == {"zero_frac", "dead_frac", "never_positive_frac"}
        assert len(stats["per_layer"]) == 2
    assert result["ffn_stats"]["init"]["mean"]["zero_frac"] == 0  # gelu has no exact zeros
    thr = result["throughput"]
    assert thr["tokens_per_s"] > 0 and 0 < thr["mfu"] < 1.5 and thr["measured_steps"] > 0
    assert result["versions"]["torch"] == torch.__version__
    assert "revision" in result["git"]
    assert result["config"]["model"]["d_model"] == 32 and result["config"]["seed"] == 0
    header = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"train/loss", "val/loss", "val/bpb", "lr", "train/grad_norm", "ffn/zero_frac"} <= set(header)
    assert (run_dir / "checkpoints" / "last.ckpt").exists() and (run_dir / RUN_CONFIG_FILE).exists()


def test_same_config_and_seed_give_the_same_result_on_cpu(finished, cache_dir, tmp_path):
    again = train(micro(cache_dir, tmp_path / "again"))
    assert again["curve"] == finished[0]["curve"]
    other_seed = train(micro(cache_dir, tmp_path / "seed1", "seed=1", "trainer.max_steps=10"))
    assert other_seed["curve"][1]["val_loss"] != finished[0]["curve"][1]["val_loss"]


class StopAt(L.Callback):
    def __init__(self, step: int, error: type[BaseException] = RuntimeError):
        self.step, self.error = step, error

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.step:
            raise self.error(f"stopped at step {self.step}")


def test_resume_after_a_stop_equals_an_uninterrupted_run(finished, cache_dir, tmp_path):
    run_dir = tmp_path / "interrupted"
    with pytest.raises(RuntimeError, match="stopped at step 25"):
        train(micro(cache_dir, run_dir), callbacks=[StopAt(25)])
    assert json.loads((run_dir / RESULT_FILE).read_text())["status"] == "failed"
    resumed = train(micro(cache_dir, run_dir))
    assert resumed["resumed_from_step"] == 20
    assert resumed["status"] == "finished"
    assert resumed["curve"] == finished[0]["curve"]  # bit for bit: weights, optimizer, schedule, data order
    assert resumed["metrics"]["final_val_loss"] == finished[0]["metrics"]["final_val_loss"]
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    assert len(rows) == len((finished[1] / "metrics.csv").read_text().splitlines())  # no rows lost or doubled


def test_a_finished_run_is_skipped(finished, cache_dir):
    _result, run_dir = finished
    again = train(micro(cache_dir, run_dir), callbacks=[StopAt(1, AssertionError)])  # would fail if it trained
    assert again == json.loads((run_dir / RESULT_FILE).read_text())


def test_a_run_dir_with_another_config_is_refused(finished, cache_dir):
    with pytest.raises(RunDirError, match=r"different config \(optim.lr: 0.003 → 0.01\)"):
        train(micro(cache_dir, finished[1], "optim.lr=0.01"))


def test_a_checkpoint_from_another_config_is_not_resumed(finished, cache_dir, tmp_path):
    run_dir = tmp_path / "foreign"
    (run_dir / "checkpoints").mkdir(parents=True)
    shutil.copy(finished[1] / "checkpoints" / "last.ckpt", run_dir / "checkpoints" / "last.ckpt")
    with pytest.raises(RunDirError, match=r"different config.*ffn"):
        train(micro(cache_dir, run_dir, "ffn=swiglu"))


def test_an_unreadable_checkpoint_is_reported(cache_dir, tmp_path):
    run_dir = tmp_path / "corrupt"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(RunDirError, match=r"cannot be read.*delete it"):
        train(micro(cache_dir, run_dir))


class PoisonAt(L.Callback):
    """Sets one weight to NaN, as a numerical blow-up would."""

    def on_train_batch_end(self, trainer, module, *args):
        if trainer.global_step == 12:
            with torch.no_grad():
                module.model.blocks[0].ffn.w_up.weight[0, 0] = float("nan")


def test_nan_marks_the_run_diverged_and_stops_it_cleanly(cache_dir, tmp_path):
    result = train(micro(cache_dir, tmp_path / "nan"), callbacks=[PoisonAt()])
    assert result["status"] == "diverged"
    assert "nan" in result["error"].lower()
    assert result["steps"] < 40  # stopped early
    on_disk = json.loads((tmp_path / "nan" / RESULT_FILE).read_text())
    assert on_disk["status"] == "diverged"


def test_compile_on_cpu_matches_eager(cache_dir, tmp_path):
    eager = train(micro(cache_dir, tmp_path / "eager", "trainer.max_steps=10"))
    compiled = train(micro(cache_dir, tmp_path / "compiled", "trainer.max_steps=10", "trainer.compile=true"))
    for a, b in zip(eager["curve"], compiled["curve"]):
        assert b["val_loss"] == pytest.approx(a["val_loss"], abs=1e-4)
    # compiling in place keeps the checkpoint keys
    state = torch.load(tmp_path / "compiled" / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    assert "model.blocks.0.ffn.w_up.weight" in state


def test_wandb_offline_run_has_config_tags_and_summary(cache_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc credentials: offline
    result = train(micro(cache_dir, tmp_path / "wb", "logger=wandb", "trainer.max_steps=10", "ffn=swiglu"))
    info = run_info(tmp_path / "wb")
    assert info["group"] == "default"
    assert {"act:swiglu", "budget:4", "bias:off", "size:micro", "seed:0"} <= set(info["tags"])
    assert json.loads(info["config"]["ffn"])["act"] == "swiglu"
    assert json.loads(info["summary"]["final/val_loss"]) == pytest.approx(result["metrics"]["final_val_loss"])
    assert json.loads(info["summary"]["status"]) == "finished"


def run_cli(*args, cwd=None):
    env = {**os.environ, "WANDB_MODE": "offline"}
    return subprocess.run([sys.executable, "-m", "ffnbench.train", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


def test_cli_trains_and_prints_where_the_result_is(cache_dir, tmp_path):
    out = run_cli(*MICRO, "trainer.max_steps=10", f"data.cache_dir={cache_dir}", f"hydra.run.dir={tmp_path / 'cli'}")
    assert out.returncode == 0, out.stderr[-2000:]
    assert str(tmp_path / "cli" / RESULT_FILE) in out.stdout
    assert (tmp_path / "cli" / ".hydra" / "config.yaml").exists()


def test_ddp_with_two_cpu_processes_agrees_with_one(finished, cache_dir, tmp_path):
    out = run_cli(*MICRO, "trainer=ddp", "trainer.devices=2", f"data.cache_dir={cache_dir}",
                  f"hydra.run.dir={tmp_path / 'ddp'}")
    assert out.returncode == 0, out.stderr[-3000:]
    ddp = json.loads((tmp_path / "ddp" / RESULT_FILE).read_text())
    single = finished[0]
    assert ddp["hardware"]["devices"] == 2 and ddp["hardware"]["strategy"] == "ddp"
    assert ddp["tokens"] == single["tokens"]  # the global batch is split, not doubled
    # Same batches, gradients averaged over two halves: equal up to float summation order.
    assert ddp["metrics"]["final_val_loss"] == pytest.approx(single["metrics"]["final_val_loss"], abs=1e-3)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["ffn=nope"], "Could not find 'ffn/nope'"),
        (["ffn=swiglu", "ffn.multiple_of=64"], "beyond ffn.max_mismatch"),
        (["trainer.devices=64"], "trainer.devices=64: only"),
        (["trainer.accelerator=gpu"], "no CUDA GPU is visible"),
        (["model.n_head=3"], "not divisible by n_head=3"),
    ],
)
def test_cli_bad_input_gets_one_clear_message(overrides, message, tmp_path):
    out = run_cli(*MICRO, *overrides, f"hydra.run.dir={tmp_path / 'bad'}", f"data.cache_dir={tmp_path / 'c'}")
    assert out.returncode != 0
    assert message in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "bad" / RESULT_FILE).exists()


def test_data_smaller_than_the_context_is_refused(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for i in range(3):
        (corpus / f"doc{i}.txt").write_text("tiny")  # 6 tokens with its separator: far below seq_len=32
    cfg = compose([*MICRO, "data=text_files", f"data.path={corpus}", f"data.cache_dir={tmp_path / 'c'}",
                   f"run_dir={tmp_path / 'run'}"])
    with pytest.raises((DataError, ConfigError), match="seq_len"):
        train(cfg)


def test_train_outside_hydra_needs_a_run_dir():
    cfg = compose(MICRO)
    with pytest.raises(ConfigError, match="run_dir"):
        train(cfg)


def test_result_is_written_atomically(finished):
    run_dir: Path = finished[1]
    assert not list(run_dir.glob(".*.tmp"))
