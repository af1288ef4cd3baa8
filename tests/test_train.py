"""Training end to end on the CPU with the micro model: the loss falls, the record is complete and exact to
rerun, resume equals an uninterrupted run, divergence is caught, compile and DDP agree, bad input is refused."""

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import lightning as L
import pytest
import torch
from wandb_files import run_info

from ffnbench.config import compose
from ffnbench.errors import ConfigError, DataError, RunDirError
from ffnbench.records import RUN_CONFIG_FILE
from ffnbench.result import RESULT_FILE, RunResult
from ffnbench.train import train

MICRO = [
    "model=micro",
    "logger=csv",
    "data.batch_size=8",
    "data.val_tokens=1024",
    "data.final_val_tokens=4096",
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


class RecordBatches(L.Callback):
    """The token rows of every training batch, by optimizer step."""

    def __init__(self):
        self.rows: dict[int, list[tuple[int, ...]]] = {}

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.rows[trainer.global_step] = [tuple(row) for row in batch[0].tolist()]


@pytest.fixture(scope="module")
def finished(cache_dir, tmp_path_factory):
    """One uninterrupted micro run that several tests compare against, and the batches it trained on."""
    run_dir = tmp_path_factory.mktemp("runs") / "reference"
    batches = RecordBatches()
    return train(micro(cache_dir, run_dir), callbacks=[batches]), run_dir, batches.rows


def test_micro_model_trains_and_the_loss_falls(finished):
    result = finished[0]
    assert isinstance(result, RunResult)
    assert result.status == "finished" and result.error is None
    m = result.metrics
    assert m["init_val_loss"] == pytest.approx(math.log(256), abs=0.3)  # uniform over bytes at init
    assert m["final_val_loss"] < m["init_val_loss"] - 1.0
    assert [c["step"] for c in result.curve] == [0, 10, 20, 30, 40]
    assert m["final_val_bpb"] == pytest.approx(m["final_val_loss"] / math.log(2))  # bytes: 1 byte per token
    assert sorted(finished[2]) == list(range(40)) and all(len(rows) == 8 for rows in finished[2].values())


def test_result_json_has_every_field(finished):
    result, run_dir = finished[:2]
    on_disk = json.loads((run_dir / RESULT_FILE).read_text())
    assert on_disk == result.to_json()
    assert list(on_disk) == ["schema", "status", "error", "name", "run_name", "run_dir", "seed", "config", "ffn",
                             "model", "params", "flops", "data", "metrics", "ffn_stats", "curve", "steps",
                             "total_steps", "tokens", "tokens_per_step", "resumed_from_step", "throughput",
                             "wall_time_s", "hardware", "versions", "git", "finished_at", "val_windows"]
    assert set(result.ffn) >= {"nominal_d_ff", "d_ff", "budget_mismatch", "params_per_layer"}
    assert set(result.params) >= {"total", "non_embedding", "ffn_total", "ffn_per_layer"}
    assert result.flops["per_token_training"] > 0
    assert result.flops["total_training"] == result.flops["per_token_training"] * 40 * 8 * 32
    assert (result.steps, result.total_steps, result.tokens, result.tokens_per_step) == (40, 40, 40 * 8 * 32, 256)
    for when in ("init", "final"):
        stats = result.ffn_stats[when]
        assert set(stats["mean"]) == {"zero_frac", "dead_frac", "never_positive_frac"}
        assert len(stats["per_layer"]) == 2
    assert result.ffn_stats["init"]["mean"]["zero_frac"] == 0  # gelu has no exact zeros
    thr = result.throughput
    assert thr["tokens_per_s"] > 0 and 0 < thr["mfu"] < 1.5 and thr["measured_steps"] > 0
    assert result.versions["torch"] == torch.__version__
    assert "revision" in result.git
    assert result.config["model"]["d_model"] == 32 and result.config["seed"] == 0
    assert result.run_name == "reference" and result.name == "default" and result.resumed_from_step is None
    header = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"train/loss", "val/loss", "val/bpb", "lr", "train/grad_norm", "ffn/zero_frac"} <= set(header)
    assert (run_dir / "checkpoints" / "last.ckpt").exists() and (run_dir / RUN_CONFIG_FILE).exists()


def test_same_config_and_seed_give_the_same_result_on_cpu(finished, cache_dir, tmp_path):
    again = train(micro(cache_dir, tmp_path / "again"))
    assert again.curve == finished[0].curve
    other_seed = train(micro(cache_dir, tmp_path / "seed1", "seed=1", "trainer.max_steps=10"))
    assert other_seed.curve[1]["val_loss"] != finished[0].curve[1]["val_loss"]


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
    assert resumed.resumed_from_step == 20
    assert resumed.status == "finished"
    assert resumed.curve == finished[0].curve  # bit for bit: weights, optimizer, schedule, data order
    assert resumed.metrics["final_val_loss"] == finished[0].metrics["final_val_loss"]
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    assert len(rows) == len((finished[1] / "metrics.csv").read_text().splitlines())  # no rows lost or doubled


def test_a_finished_run_is_skipped(finished, cache_dir):
    run_dir = finished[1]
    before = (run_dir / RESULT_FILE).read_text()
    again = train(micro(cache_dir, run_dir), callbacks=[StopAt(1, AssertionError)])  # would fail if it trained
    assert again.to_json() == json.loads(before) and (run_dir / RESULT_FILE).read_text() == before


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
    assert result.status == "diverged"
    assert "nan" in result.error.lower()
    assert result.steps < 40  # stopped early
    on_disk = json.loads((tmp_path / "nan" / RESULT_FILE).read_text())
    assert on_disk["status"] == "diverged"


class NaNInValidation(L.Callback):
    """From `hook` on, the model's outputs in eval mode are NaN; training stays finite."""

    def __init__(self, hook: str):
        setattr(self, hook, self.poison)

    @staticmethod
    def poison(trainer, module):
        forward = module.model.forward

        def poisoned(*args, **kwargs):
            out = forward(*args, **kwargs)
            return out if module.model.training else out * float("nan")

        module.model.forward = poisoned


def test_a_loss_that_is_nan_only_in_validation_marks_the_run_diverged(cache_dir, tmp_path):
    result = train(micro(cache_dir, tmp_path / "nan-val"), callbacks=[NaNInValidation("on_train_start")])
    assert result.status == "diverged" and result.steps == 10  # the first validation in fit stops it
    assert result.error == "validation loss became nan at step 10"
    assert result.metric("final_val_loss") is None and result.curve[0]["val_loss"] > 0
    assert json.loads((tmp_path / "nan-val" / RESULT_FILE).read_text())["status"] == "diverged"


def test_a_model_that_is_nan_at_init_trains_no_step(cache_dir, tmp_path):
    result = train(micro(cache_dir, tmp_path / "nan-init"), callbacks=[NaNInValidation("on_validation_start")])
    assert result.status == "diverged" and result.steps == 0
    assert result.error == "validation loss became nan at step 0"


def test_a_final_validation_that_is_nan_marks_the_run_diverged(cache_dir, tmp_path):
    result = train(micro(cache_dir, tmp_path / "nan-final"), callbacks=[NaNInValidation("on_train_end")])
    assert result.status == "diverged" and result.steps == 40
    assert result.error == "validation loss became nan at step 40"


def test_the_final_validation_records_the_loss_of_every_window(finished):
    result = finished[0]
    windows = result.val_windows
    assert len(windows) == 4096 // 32 == result.data["final_val_windows"]
    assert all(math.isfinite(w) and w > 0 for w in windows)
    # Every window has seq_len tokens: the final loss is the mean of the window means.
    assert result.metrics["final_val_loss"] == pytest.approx(sum(windows) / len(windows), rel=1e-9)
    assert result.metrics["final_val_loss"] != result.curve[-1]["val_loss"]  # another set than the curve's
    assert result.metrics["best_val_loss"] == min(c["val_loss"] for c in result.curve)


def test_compile_on_cpu_matches_eager(cache_dir, tmp_path):
    eager = train(micro(cache_dir, tmp_path / "eager", "trainer.max_steps=10"))
    compiled = train(micro(cache_dir, tmp_path / "compiled", "trainer.max_steps=10", "trainer.compile=true"))
    for a, b in zip(eager.curve, compiled.curve):
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
    assert json.loads(info["summary"]["final/val_loss"]) == pytest.approx(result.metrics["final_val_loss"])
    assert json.loads(info["summary"]["status"]) == "finished"


def run_cli(*args, cwd=None, env=None):
    env = {**os.environ, "WANDB_MODE": "offline", **(env or {})}
    return subprocess.run([sys.executable, "-m", "ffnbench.train", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


def test_cli_trains_and_prints_where_the_result_is(cache_dir, tmp_path):
    out = run_cli(*MICRO, "trainer.max_steps=10", f"data.cache_dir={cache_dir}", f"hydra.run.dir={tmp_path / 'cli'}")
    assert out.returncode == 0, out.stderr[-2000:]
    assert str(tmp_path / "cli" / RESULT_FILE) in out.stdout
    assert (tmp_path / "cli" / ".hydra" / "config.yaml").exists()


# Loaded by every Python process started with this folder on PYTHONPATH (the DDP launcher's child included): each
# rank appends the rows of every training batch it receives to $FFNBENCH_TEST_BATCHES, one JSON line per batch.
RECORD_BATCHES = """
import json, os
import lightning as L

class _RecordBatches(L.Callback):
    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        with open(os.environ["FFNBENCH_TEST_BATCHES"], "a") as f:
            f.write(json.dumps({"rank": trainer.global_rank, "step": trainer.global_step,
                                "rows": batch[0].tolist()}) + "\\n")

_init = L.Trainer.__init__

def _with_recorder(self, *args, callbacks=None, **kwargs):
    _init(self, *args, callbacks=[*(callbacks or []), _RecordBatches()], **kwargs)

L.Trainer.__init__ = _with_recorder
"""


def test_ddp_ranks_each_train_on_half_of_every_batch(finished, cache_dir, tmp_path):
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(textwrap.dedent(RECORD_BATCHES))
    log = tmp_path / "batches.jsonl"
    pythonpath = os.pathsep.join([str(tmp_path / "hook"), *filter(None, [os.environ.get("PYTHONPATH")])])
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


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["ffn=nope"], "Could not find 'ffn/nope'"),
        (["-m", "ffn=relu,nope"], "Could not find 'ffn/nope'"),
        (["ffn.act=nope"], "ffn.act: unknown FFN variant 'nope'"),
        (["optim.lr=-1"], "optim.lr: must be > 0, got -1"),
        (["optim.betas=[0.9,1.5]"], "optim.betas[1]: must be in [0, 1), got 1.5"),
        (["trainer.val_every=0"], "trainer.val_every: must be a positive integer, got 0"),
        (["model.seq_len=100000"], "model.seq_len"),
        (["ffn=swiglu", "ffn.multiple_of=64"], "beyond ffn.max_mismatch"),
        (["trainer.devices=64"], "trainer.devices=64: only"),
        (["trainer.accelerator=gpu"], "no CUDA GPU is visible"),
        (["trainer.compile=true", "trainer.compile_mode=reduce-overhead"],
         "trainer.compile_mode=reduce-overhead: CUDA graphs need a CUDA GPU and this run is on the cpu"),
        (["model.n_head=3"], "not divisible by n_head=3"),
    ],
)
def test_cli_bad_input_is_one_line_exit_2_and_leaves_no_run_directory(overrides, message, tmp_path):
    if "trainer.accelerator=gpu" in overrides and torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    runs_root = tmp_path / "runs"
    out = run_cli(*MICRO, *overrides, f"runs_root={runs_root}", f"data.cache_dir={tmp_path / 'c'}", cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    assert out.stderr.strip().count("\n") == 0 and out.stderr.startswith("ffnbench: error: "), out.stderr[-3000:]
    assert message in out.stderr
    assert not runs_root.exists() or not any(runs_root.iterdir()), list(runs_root.rglob("*"))


def test_a_refused_start_keeps_a_directory_that_holds_work(finished, cache_dir, tmp_path):
    run_dir = tmp_path / "kept"
    shutil.copytree(finished[1], run_dir)
    out = run_cli(*MICRO, "optim.lr=0.01", f"data.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert out.returncode == 2 and "different config" in out.stderr
    assert (run_dir / RESULT_FILE).exists() and (run_dir / "checkpoints" / "last.ckpt").exists()


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
