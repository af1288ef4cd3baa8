"""Resume: a run stopped by an error or Ctrl-C, or in its final validation, resumes to equal an uninterrupted
run; a finished run is skipped; a run directory or checkpoint of another config is refused."""

import json
import shutil
import signal

import lightning as L
import pytest
from lightning.pytorch.trainer.states import TrainerFn
from micro_runs import MICRO, StopAt, micro, run_cli

from ffnbench.errors import RunDirError
from ffnbench.runs.result import RESULT_FILE
from ffnbench.train import train


class InterruptBeforeStep(L.Callback):
    """Ctrl-C as optimizer step `step` is about to be taken: inside a batch of several steps (trainer.inner_steps)."""

    def __init__(self, step: int):
        self.step = step

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        if trainer.global_step == self.step:
            raise KeyboardInterrupt


def test_ctrl_c_inside_a_batch_of_steps_saves_that_step_and_the_rerun_equals_an_uninterrupted_run(
        finished, cache_dir, tmp_path, capsys):
    run_dir = tmp_path / "ctrl-c"
    sigint = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as exit_:  # Lightning's answer to Ctrl-C (it also ignores further ones)
            train(micro(cache_dir, run_dir), callbacks=[InterruptBeforeStep(23)])  # batches of 5 steps: 20-24
    finally:
        signal.signal(signal.SIGINT, sigint)
    assert exit_.value.code == 130  # 128 + SIGINT, as a shell reports a process ended by Ctrl-C
    stopped = json.loads((run_dir / RESULT_FILE).read_text())
    line = (f"stopped by Ctrl-C at step 23; checkpoint at step 23 ({run_dir / 'checkpoints' / 'last.ckpt'}): "
            "rerun the same command to resume")
    assert stopped["status"] == "interrupted" and stopped["error"] == line
    err = capsys.readouterr().err
    assert f"ffnbench: ctrl-c: {line}\n" in err and "KeyboardInterrupt" not in err, err[-3000:]
    resumed = train(micro(cache_dir, run_dir))
    assert resumed.resumed_from_step == 23 and resumed.status == "finished"
    assert resumed.curve == finished[0].curve  # validated at steps 30 and 40 again, bit for bit
    rows = (run_dir / "metrics.csv").read_text().splitlines()
    assert len(rows) == len((finished[1] / "metrics.csv").read_text().splitlines())  # no rows lost or doubled


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


class StopInFinalValidation(L.Callback):
    """Raises as the final validation (the one after fit, at the last step) starts, as a SIGTERM there would."""

    def on_validation_start(self, trainer, pl_module) -> None:
        if trainer.state.fn == TrainerFn.VALIDATING and trainer.global_step > 0:  # not step 0's, nor fit's own
            raise RuntimeError("stopped in the final validation")


def test_a_stop_in_the_final_validation_leaves_the_run_to_resume_not_finished(finished, cache_dir, tmp_path):
    # A finished record must carry the final metrics: one stopped after fit but before its final validation would
    # otherwise read "finished" with the last periodic validation's loss and no per-window losses, and be skipped
    # for good.
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


def test_a_refused_start_keeps_a_directory_that_holds_work(finished, cache_dir, tmp_path):
    run_dir = tmp_path / "kept"
    shutil.copytree(finished[1], run_dir)
    out = run_cli(*MICRO, "optim.lr=0.01", f"data.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert out.returncode == 2 and "different config" in out.stderr
    assert (run_dir / RESULT_FILE).exists() and (run_dir / "checkpoints" / "last.ckpt").exists()
