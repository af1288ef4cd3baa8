"""Training in one process on the CPU with the micro model: the loss falls, the record is complete and exact to
rerun, batches of several steps train as single steps, divergence is caught, compile agrees with eager and every
run of a process stays compiled, bad input is refused. The end-to-end runs (resume, signals, DDP, W&B, devices)
are in tests/integration/."""

import errno
import json
import math
import os
import runpy
import sys
from collections import Counter
from pathlib import Path

import lightning as L
import pytest
import torch
from micro_runs import MICRO, hook_pythonpath, micro, run_cli

from ffnbench.config.compose import compose
from ffnbench.errors import ConfigError, DataError
from ffnbench.runs.result import RESULT_FILE, RunResult
from ffnbench.runs.rundir import RUN_CONFIG_FILE
from ffnbench.train import train


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
    # validation runs eager in a compiled run too: at step 0 (the same weights) its loss is the eager run's, bit for bit
    assert compiled.curve[0]["val_loss"] == eager.curve[0]["val_loss"]
    assert eager.compile == {"enabled": False} and compiled.compile["compiled"]  # result.json says which
    # compiling in place keeps the checkpoint keys
    state = torch.load(tmp_path / "compiled" / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    assert "model.blocks.0.ffn.w_up.weight" in state


@pytest.mark.parametrize("backend", ["eager", pytest.param("inductor", marks=pytest.mark.slow)])
def test_every_run_of_a_multirun_process_is_compiled(cache_dir, tmp_path, monkeypatch, backend):
    # The basic and joblib launchers train many configs in one process. Were they to share one dynamo cache, the
    # blocks' forward would hit dynamo's recompile limit (8) by the third or fourth variant and every later run
    # would be eager.
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


def test_a_compiled_run_compiles_each_function_once_and_validates_eager(cache_dir, tmp_path, monkeypatch):
    # Validation at step 0, inside fit and at the end (the final set included) runs eager, so each compiled function
    # (the blocks' forward, the loss head) compiles its training graph and nothing else: compiled validations cost a
    # graph per grad mode and reduction (7 graphs, 5 recompiles under inference_mode; 4 and 2 under no_grad). The
    # "eager" backend: dynamo's guards and caching are the backend's own business, not inductor's.
    compile_ = torch.nn.Module.compile
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kw: compile_(self, backend="eager", **kw))
    result = train(micro(cache_dir, tmp_path / "run", "trainer.compile=true", "trainer.max_steps=20"))
    assert [c["step"] for c in result.curve] == [0, 10, 20] and result.val_windows  # every kind of validation ran
    assert result.compile["compiled"] and result.compile["graph_breaks"] == 0
    assert result.compile["compiles_per_frame"] == [1, 1]  # the blocks' forward, the loss head: training only
    assert result.compile["graphs"] == 2 and result.compile["recompiles"] == 0


def test_cli_trains_and_prints_where_the_result_is_and_how_to_sample_from_it(cache_dir, tmp_path):
    out = run_cli(*MICRO, "trainer.max_steps=10", f"data.cache_dir={cache_dir}", "hydra.run.dir=runs/cli", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    run_dir = tmp_path / "runs" / "cli"
    assert str(run_dir / RESULT_FILE) in out.stdout
    assert (run_dir / ".hydra" / "config.yaml").exists()
    assert not (run_dir / "train.log").exists()  # Hydra's job log: it only ever stayed empty
    assert "GPU available" not in out.stdout + out.stderr  # Lightning's accelerator banner
    metrics = RunResult.read(run_dir).metrics
    lines = out.stdout.splitlines()
    assert lines[-2] == (f"ffnbench: finished: val loss {metrics['final_val_loss']:.4f}, val bpb "
                         f"{metrics['final_val_bpb']:.4f} → {run_dir / RESULT_FILE}")
    # the run's folder, as the command that samples from it, relative to where the command ran
    assert lines[-1] == "ffnbench: sample from it: ffnbench sample runs/cli"
    # what the final validation costs, on the first line (data.final_val_tokens: 4,096 here, 10 steps × 256 trained)
    assert lines[0].endswith("; final validation on 4,096 tokens (data.final_val_tokens), 1.6× the tokens it trains on")


def test_a_run_worse_than_chance_finishes_without_learning_and_a_warmup_longer_than_the_run_is_stated(cache_dir,
                                                                                                      tmp_path, capsys):
    # lr 3.0 on the micro model, 30 steps of its 50-step warmup: it ends far above the uniform loss ln 256
    result = train(micro(cache_dir, tmp_path / "run", "trainer.max_steps=30", "optim.lr=3.0"))
    assert result.status == "finished" and result.metrics["final_val_loss"] > math.log(256)
    assert [(i["kind"], i["step"]) for i in result.instabilities] == [("no_learning", 30)]
    assert RunResult.read(tmp_path / "run").instabilities == result.instabilities  # result.json says it
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == ("ffnbench: run: optim.warmup_steps=50 is not shorter than the run (30 steps): the warmup is "
                        "cut to 29 steps, the lr peaks at the end, and no plateau, spike or stall after warmup is "
                        "judged")
    assert lines[-1].startswith("ffnbench: finished without learning: val loss ")


def test_train_yaml_states_the_rounding_rule_of_multiple_of_that_the_code_applies():
    from ffnbench.config.compose import CONF_DIR
    from ffnbench.model.ffn import round_to_multiple

    comment = next(line for line in (CONF_DIR / "train.yaml").read_text().splitlines()
                   if line.strip().startswith("multiple_of:"))
    assert round_to_multiple(90, 64) == 64 and round_to_multiple(96, 64) == 128  # the nearest multiple, ties up
    assert "nearest multiple" in comment and "ties up" in comment and "round d_ff up" not in comment


def full_disk_at(call: int):
    """A Trainer.save_checkpoint whose `call`-th call finds the disk full: it leaves a partial file, as a write that
    ran out of space does, and raises the OSError such a write raises."""
    save, calls = L.Trainer.save_checkpoint, []

    def save_checkpoint(self, filepath, *args, **kwargs):
        calls.append(filepath)
        if len(calls) == call:
            Path(filepath).write_bytes(b"x" * 1000)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(filepath))
        return save(self, filepath, *args, **kwargs)

    return save_checkpoint


def test_a_disk_that_fills_at_the_second_checkpoint_is_one_line_leaves_no_tmp_and_the_rerun_resumes(finished, cache_dir,
                                                                                                    tmp_path,
                                                                                                    monkeypatch):
    from ffnbench.fileio import DiskFull

    run_dir = tmp_path / "run"
    monkeypatch.setattr(L.Trainer, "save_checkpoint", full_disk_at(2))  # step 10's checkpoint is written, step 20's not
    with pytest.raises(DiskFull) as stopped:
        train(micro(cache_dir, run_dir))
    line = str(stopped.value)
    assert "\n" not in line and line.startswith(f"run: disk full: {run_dir / 'checkpoints'} has ")
    assert " free and a checkpoint of this run needs about " in line
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    assert line.endswith(f"then rerun the same command to resume from step 10 ({ckpt})")
    assert not list(run_dir.rglob("*.tmp"))  # the partial checkpoint is gone, not left filling the disk
    assert torch.load(ckpt, weights_only=False)["global_step"] == 10  # intact
    record = RunResult.read(run_dir)
    assert (record.status, record.error, record.steps) == ("failed", line, 20)
    monkeypatch.undo()  # space freed: the same command resumes from step 10, bit for bit
    resumed = train(micro(cache_dir, run_dir))
    assert resumed.status == "finished" and resumed.resumed_from_step == 10
    assert resumed.metrics["final_val_loss"] == finished[0].metrics["final_val_loss"]


# Loaded into the command's process (micro_runs.hook_pythonpath): every checkpoint finds the disk full.
FULL_DISK = """
import errno, os
from pathlib import Path
import lightning as L

class _Hook(L.Callback):
    def setup(self, trainer, module, stage):
        def full(filepath, *args, **kwargs):
            Path(filepath).write_bytes(b"x" * 1000)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(filepath))

        trainer.save_checkpoint = full
"""


def test_the_command_on_a_full_disk_says_so_in_one_line_and_exits_non_zero(cache_dir, tmp_path):
    out = run_cli(*MICRO, "trainer.max_steps=60", f"data.cache_dir={cache_dir}", f"hydra.run.dir={tmp_path / 'run'}",
                  env={"PYTHONPATH": hook_pythonpath(tmp_path, FULL_DISK)})
    assert out.returncode == 1
    lines = (out.stdout + out.stderr).splitlines()
    assert len(lines) <= 3, lines  # the run's first line, then the disk's: no traceback, no second one
    assert out.stderr.splitlines() == [next(line for line in lines if " disk full: " in line)]
    assert out.stderr.startswith(f"ffnbench: run: disk full: {tmp_path / 'run' / 'checkpoints'} has ")
    assert out.stderr.rstrip().endswith("then rerun the same command to start it again")
    assert not list((tmp_path / "run").rglob("*.tmp"))
    assert RunResult.read(tmp_path / "run").status == "failed"


@pytest.mark.parametrize("where", ["proc", "file", "under_a_file", "run_dir", "multirun"])
@pytest.mark.filterwarnings("ignore:'ffnbench.train' found in sys.modules:RuntimeWarning")  # runpy: as intended
def test_an_output_folder_that_cannot_be_written_is_one_line_and_exit_2_before_any_work(where, tmp_path, monkeypatch,
                                                                                       capsys):
    from hydra.core.global_hydra import GlobalHydra

    (tmp_path / "afile").write_text("")
    settings = {"proc": ["runs_root=/proc/x"], "file": [f"runs_root={tmp_path / 'afile'}"],
                "under_a_file": [f"runs_root={tmp_path / 'afile' / 'sub'}"],
                "run_dir": [f"runs_root={tmp_path / 'runs'}", f"run_dir={tmp_path / 'afile' / 'run'}"],
                "multirun": ["-m", "runs_root=/proc/x", "seed=0,1"]}[where]
    setting = "run_dir" if where == "run_dir" else settings[-1 if where != "multirun" else 1]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["ffnbench.train", *MICRO, f"data.cache_dir={tmp_path / 'c'}", *settings])
    GlobalHydra.instance().clear()
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("ffnbench.train", run_name="__main__")
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err[-3000:]
    assert err.count("\n") == 1 and err.startswith(f"ffnbench: error: {setting}: "), err[-3000:]
    assert err.rstrip().endswith(f"set {setting.split('=')[0]}=<a folder you can write>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # no data cache, no run folder: no work started


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
@pytest.mark.filterwarnings("ignore:'ffnbench.train' found in sys.modules:RuntimeWarning")  # runpy: as intended
def test_cli_bad_input_is_one_line_exit_2_and_leaves_no_run_directory(overrides, message, tmp_path, monkeypatch,
                                                                         capsys):
    """`python -m ffnbench.train` run as __main__ in this process (runpy: Hydra finds its config as it does from the
    command line), which saves a Python start per case; the subprocess test below checks the real command once."""
    if "trainer.accelerator=gpu" in overrides and torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    from hydra.core.global_hydra import GlobalHydra

    runs_root = tmp_path / "runs"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["ffnbench.train", *MICRO, *overrides, f"runs_root={runs_root}",
                                      f"data.cache_dir={tmp_path / 'c'}"])
    GlobalHydra.instance().clear()
    with pytest.raises(SystemExit) as exit_:
        runpy.run_module("ffnbench.train", run_name="__main__")
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err[-3000:]
    assert err.strip().count("\n") == 0 and err.startswith("ffnbench: error: "), err[-3000:]
    assert message in err
    assert not runs_root.exists() or not any(runs_root.iterdir()), list(runs_root.rglob("*"))


def test_the_command_line_refuses_bad_input_in_one_line_with_exit_2(tmp_path):
    runs_root = tmp_path / "runs"
    out = run_cli(*MICRO, "optim.lr=-1", f"runs_root={runs_root}", f"data.cache_dir={tmp_path / 'c'}", cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    assert out.stderr.startswith("ffnbench: error: optim.lr: must be > 0, got -1") and out.stderr.count("\n") == 1
    assert not runs_root.exists() or not any(runs_root.iterdir()), list(runs_root.rglob("*"))


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


def test_a_checkpoint_pickles_no_ffnbench_class_so_a_moved_module_keeps_it_resumable(finished):
    # A checkpoint is unpickled whole (rundir and Lightning load it with weights_only=False): a class of ffnbench in
    # it would be looked up by its module path on resume, and moving that module (the package layout) would leave an
    # interrupted run unable to resume. It holds tensors and plain data only, so no old path needs mapping on load.
    import pickle
    import types

    found = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module, name):
            found.add(f"{module}.{name}")
            return super().find_class(module, name)

    recording = types.SimpleNamespace(Unpickler=Recording, load=pickle.load, __name__="pickle")
    saved = torch.load(finished[1] / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False,
                       pickle_module=recording)
    assert saved["state_dict"] and saved["ffnbench"]["fingerprint"]  # the whole checkpoint was read
    assert "torch._utils._rebuild_tensor_v2" in found  # the recorder saw the globals the tensors name
    assert not [g for g in found if g.startswith("ffnbench")], found


def test_ffnbench_train_finds_the_config_from_any_folder(tmp_path):
    """`ffnbench train` imports this module (it is not __main__ there): the config path must not be relative to it."""
    import subprocess

    out = subprocess.run([sys.executable, "-m", "ffnbench", "train", "--cfg", "job", "model=micro"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "d_model:" in out.stdout
