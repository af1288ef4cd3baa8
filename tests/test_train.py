"""Training end to end on the CPU with the micro model: the loss falls, the record is complete and exact to
rerun, resume equals an uninterrupted run (after SIGTERM and submitit's pre-emption signal too), divergence is
caught, compile and DDP agree, every run of a process stays compiled, wandb's files hold what the dashboards
plot, bad input is refused."""

import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.trainer.states import TrainerFn
from wandb_files import read_run, run_files

from ffnbench.config.compose import compose
from ffnbench.errors import ConfigError, DataError, RunDirError
from ffnbench.loggers import WANDB_RUN_FILE
from ffnbench.readout import DEFER_ENV
from ffnbench.report import wandb as report_wandb
from ffnbench.result import RESULT_FILE, RunResult
from ffnbench.rundir import RUN_CONFIG_FILE
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
        for i, x in enumerate(batch[0].tolist()):  # a batch stacks the batches of trainer.inner_steps steps
            if trainer.global_step + i < trainer.max_steps:  # the run's last batch may hold steps it never takes
                self.rows[trainer.global_step + i] = [tuple(row) for row in x]


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
                             "wall_time_s", "hardware", "versions", "git", "finished_at", "val_windows", "compile",
                             "train_curve", "instabilities"]
    assert result.compile == {"enabled": False}
    assert [s for s, _ in result.train_curve] == list(range(4, 40, 5)) and result.instabilities is not None
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


class InterruptBeforeStep(L.Callback):
    """Ctrl-C as optimizer step `step` is about to be taken: inside a batch of several steps (trainer.inner_steps)."""

    def __init__(self, step: int):
        self.step = step

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if trainer.global_step == self.step:
            raise KeyboardInterrupt


def test_ctrl_c_inside_a_batch_of_steps_saves_that_step_and_the_rerun_equals_an_uninterrupted_run(
        finished, cache_dir, tmp_path):
    run_dir = tmp_path / "ctrl-c"
    sigint = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit):  # Lightning's answer to Ctrl-C (it also ignores further ones)
            train(micro(cache_dir, run_dir), callbacks=[InterruptBeforeStep(23)])  # batches of 5 steps: 20-24
    finally:
        signal.signal(signal.SIGINT, sigint)
    assert json.loads((run_dir / RESULT_FILE).read_text())["status"] == "failed"
    resumed = train(micro(cache_dir, run_dir))
    assert resumed.resumed_from_step == 23 and resumed.status == "finished"
    assert resumed.curve == finished[0].curve  # validated at steps 30 and 40 again, bit for bit
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    assert len(rows) == len((finished[1] / "metrics.csv").read_text().splitlines())  # no rows lost or doubled


def test_batches_of_several_steps_train_as_one_step_a_batch_does(cache_dir, tmp_path):
    # 37 steps: the last batch of 5 (trainer.inner_steps at MICRO's log_every) is cut short at 35-36, and validation
    # still happens at multiples of val_every only, then at the end.
    one, five = (train(micro(cache_dir, tmp_path / f"k{k}", "trainer.max_steps=37", f"trainer.inner_steps={k}"))
                 for k in (1, 5))
    assert [point["step"] for point in five.curve] == [0, 10, 20, 30, 37]
    assert five.curve == one.curve and five.val_windows == one.val_windows
    assert five.metrics["final_train_loss"] == one.metrics["final_train_loss"]
    assert (tmp_path / "k1" / "metrics.csv").read_text().count("\n") == \
        (tmp_path / "k5" / "metrics.csv").read_text().count("\n")


class StopInFinalValidation(L.Callback):
    """Raises as the final validation (the one after fit, at the last step) starts, as a SIGTERM there would."""

    def on_validation_start(self, trainer, pl_module) -> None:
        if trainer.state.fn == TrainerFn.VALIDATING and trainer.global_step > 0:  # not step 0's, nor fit's own
            raise RuntimeError("stopped in the final validation")


def test_a_stop_in_the_final_validation_leaves_the_run_to_resume_not_finished(finished, cache_dir, tmp_path):
    # A finished record must carry the final metrics: one stopped after fit but before its final validation once
    # read "finished" with the last periodic validation's loss and no per-window losses, and was skipped for good.
    run_dir = tmp_path / "stopped"
    with pytest.raises(RuntimeError, match="stopped in the final validation"):
        train(micro(cache_dir, run_dir), callbacks=[StopInFinalValidation()])
    assert json.loads((run_dir / RESULT_FILE).read_text())["status"] == "failed"
    resumed = train(micro(cache_dir, run_dir))
    assert resumed.status == "finished" and resumed.val_windows == finished[0].val_windows
    assert resumed.metrics["final_val_loss"] == finished[0].metrics["final_val_loss"]


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
        if trainer.global_step == 15:
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
    assert eager.compile == {"enabled": False} and compiled.compile["compiled"]  # result.json says which
    # compiling in place keeps the checkpoint keys
    state = torch.load(tmp_path / "compiled" / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    assert "model.blocks.0.ffn.w_up.weight" in state


@pytest.mark.parametrize("backend", ["eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_every_run_of_a_multirun_process_is_compiled(cache_dir, tmp_path, monkeypatch, backend):
    # The basic and joblib launchers train many configs in one process. Sharing one dynamo cache, the blocks'
    # forward hit dynamo's recompile limit (8) by the third or fourth variant and every later run was eager.
    # dynamo's caching is the same whatever the backend; "eager" only skips inductor's code generation (minutes).
    from torch._dynamo.utils import counters

    if backend != "inductor":
        compile_ = torch.nn.Module.compile
        monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: compile_(self, backend=backend, **kw))
    for act in ("relu", "gelu", "swiglu", "relu2"):
        frames = Counter(counters["frames"])
        result = train(micro(cache_dir, tmp_path / act, f"ffn={act}", "trainer.compile=true", "trainer.max_steps=2",
                             "trainer.val_every=2", "data.final_val_tokens=1024"))
        frames = Counter(counters["frames"]) - frames
        assert frames["total"] > 0 and frames["ok"] == frames["total"], (act, frames)  # no frame left eager
        assert result.compile["compiled"] and result.compile["eager_frames"] == 0, (act, result.compile)
        assert result.compile["frames"] == frames["ok"] and result.compile["graph_breaks"] == 0


def test_wandb_run_resumes_under_its_id_plots_against_tokens_and_has_the_report_keys(cache_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    run_dir, overrides = tmp_path / "wb", ["logger=wandb", "ffn=swiglu"]
    with pytest.raises(RuntimeError, match="stopped at step 25"):  # rows up to step 24 logged, checkpoint at 20
        train(micro(cache_dir, run_dir, *overrides), callbacks=[StopAt(25)])
    result = train(micro(cache_dir, run_dir, *overrides))
    assert result.resumed_from_step == 20 and result.status == "finished"
    first, resumed = (read_run(f) for f in run_files(run_dir))
    # one wandb run, in two parts: `wandb sync` appends the second to the first
    assert first["id"] == resumed["id"] == json.loads((run_dir / WANDB_RUN_FILE).read_text())["id"]
    assert resumed["group"] == "default"
    assert {"act:swiglu", "budget:4", "bias:off", "size:micro", "seed:0"} <= set(resumed["tags"])
    assert json.loads(resumed["config"]["ffn"])["act"] == "swiglu"  # the report groups by config.ffn.act
    assert json.loads(resumed["summary"]["final/val_loss"]) == pytest.approx(result.metrics["final_val_loss"])
    assert json.loads(resumed["summary"]["status"]) == "finished"
    # tokens is the x-axis of the training, validation and FFN metrics
    assert all(resumed["metrics"][glob] == "tokens" for glob in ("train/*", "val/*", "ffn/*"))
    rows = first["history"] + resumed["history"]
    # every validation row carries tokens, at the step result.json gives it (the final validation repeats the last)
    validation = [(r["trainer/global_step"], r["tokens"]) for r in rows if "val/loss" in r]
    curve = [(c["step"], c["tokens"]) for c in result.curve]
    assert validation == [*curve, curve[-1]]
    # the steps retrained after the checkpoint (20-24) are not logged a second time
    assert [r["trainer/global_step"] for r in rows if "train/loss" in r] == list(range(4, 40, 5))
    # every key the W&B report plots is one the run logged
    assert report_wandb.report_keys() <= set(resumed["summary"]) | {key for row in rows for key in row}


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

class _Hook(L.Callback):
    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        with open(os.environ["FFNBENCH_TEST_BATCHES"], "a") as f:
            for i, x in enumerate(batch[0].tolist()):  # the batches of trainer.inner_steps steps, stacked
                if trainer.global_step + i < trainer.max_steps:
                    f.write(json.dumps({"rank": trainer.global_rank, "step": trainer.global_step + i,
                                        "rows": x}) + "\\n")
"""


# Appended to a hook's source: every Trainer the process builds gets the hook's callback `_Hook` besides its own.
ADD_HOOK_CALLBACK = """
_init = L.Trainer.__init__

def _with_hook(self, *args, callbacks=None, **kwargs):
    _init(self, *args, callbacks=[*(callbacks or []), _Hook()], **kwargs)

L.Trainer.__init__ = _with_hook
"""


def hook_pythonpath(tmp_path, source: str) -> str:
    """The PYTHONPATH of a child process that loads `source` (which defines the callback `_Hook`) as its
    sitecustomize, with its Trainers patched to use that callback."""
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(textwrap.dedent(source) + ADD_HOOK_CALLBACK)
    return os.pathsep.join([str(tmp_path / "hook"), *filter(None, [os.environ.get("PYTHONPATH")])])


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


# Loaded by a Python process started with this folder on PYTHONPATH: at step $FFNBENCH_TEST_SIGTERM_AT the process
# sends itself SIGTERM, as a scheduler does when it pre-empts a job or its time is up.
SIGTERM_AT = """
import os, signal
import lightning as L

class _Hook(L.Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == int(os.environ["FFNBENCH_TEST_SIGTERM_AT"]):
            os.kill(os.getpid(), signal.SIGTERM)
"""


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


def test_sigterm_mid_run_saves_that_step_and_the_rerun_resumes_from_it(finished, cache_dir, tmp_path):
    pythonpath = hook_pythonpath(tmp_path, SIGTERM_AT)
    args = [*MICRO, f"data.cache_dir={cache_dir}", f"hydra.run.dir={tmp_path / 'run'}"]
    out = run_cli(*args, env={"PYTHONPATH": pythonpath, "FFNBENCH_TEST_SIGTERM_AT": "25"})
    assert out.returncode == 143, out.stderr[-3000:]  # 128 + SIGTERM, as a process killed by it
    stopped = json.loads((tmp_path / "run" / RESULT_FILE).read_text())
    assert stopped["status"] == "failed" and "stopped by SIGTERM at step 25" in stopped["error"], stopped["error"]
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

    tests = str(Path(__file__).parent)
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


# ---- GPU nodes and clusters, on the CPU ------------------------------------------------------------------------


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
