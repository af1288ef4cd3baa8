"""Run directories: a start plans skip / resume / fresh from what the directory holds, refuses another config's
directory or checkpoint, and a refused start removes only what Hydra made for it."""

import json
import platform
from pathlib import Path

import pytest
import torch

from ffnbench.errors import ConfigError, RunDirError
from ffnbench.runs.migrate import migrate_config
from ffnbench.runs.result import RESULT_FILE
from ffnbench.runs.rundir import (
    RUN_CONFIG_FILE,
    RunLock,
    check_writable,
    last_checkpoint,
    lock_holder,
    plan_run,
    remove_failed_start,
    resolve_run_dir,
)

# A run's config as a run of today stores it: with every key that ffnbench.runs.migrate gives an older one.
CONFIG = migrate_config({"seed": 0, "name": "exp", "optim": {"lr": 0.003},
                         "trainer": {"max_steps": 40, "progress_bar": True}})


def write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def checkpoint(run_dir: Path, fingerprint: dict, step: int) -> Path:
    path = last_checkpoint(run_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"ffnbench": {"fingerprint": fingerprint}, "global_step": step}, path)
    return path


def test_an_empty_or_missing_directory_starts_fresh(tmp_path):
    assert plan_run(tmp_path / "new", CONFIG).action == "fresh"
    plan = plan_run(tmp_path, CONFIG)
    assert (plan.action, plan.ckpt, plan.resumed_from, plan.previous) == ("fresh", None, None, None)


@pytest.mark.parametrize("status", ["finished", "diverged"])
def test_a_final_result_is_skipped(tmp_path, status):
    write(tmp_path / RUN_CONFIG_FILE, CONFIG)
    write(tmp_path / RESULT_FILE, {"status": status, "metrics": {"final_val_loss": 1.5}})
    plan = plan_run(tmp_path, CONFIG)
    assert plan.action == "skip" and plan.previous.status == status
    assert plan.previous.metric("final_val_loss") == 1.5


@pytest.mark.parametrize("status", ["failed", "interrupted"])
def test_an_interrupted_run_resumes_from_its_checkpoint(tmp_path, status):
    write(tmp_path / RUN_CONFIG_FILE, CONFIG)
    write(tmp_path / RESULT_FILE, {"status": status, "error": "stopped by Ctrl-C at step 23"})
    ckpt = checkpoint(tmp_path, {**CONFIG, "trainer": {"max_steps": 40, "progress_bar": False}}, step=20)
    plan = plan_run(tmp_path, CONFIG)  # progress_bar does not change what a run computes
    assert (plan.action, plan.ckpt, plan.resumed_from) == ("resume", ckpt, 20)
    assert plan.previous.status == status


def test_an_output_folder_under_a_file_is_refused_naming_the_setting(tmp_path):
    (tmp_path / "afile").write_text("")
    for folder in (tmp_path / "afile", tmp_path / "afile" / "x" / "y"):
        with pytest.raises(ConfigError, match=rf"^runs_root=R: {tmp_path / 'afile'} is a file, not a folder, so "
                                              rf"{folder} cannot be made; set runs_root=<a folder you can write>$"):
            check_writable(folder, "runs_root=R")


def test_an_output_folder_through_a_dangling_link_says_so_and_a_tilde_is_checked_where_hydra_makes_it(tmp_path,
                                                                                                         monkeypatch):
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match=r"gone is a link to nothing \(.*nowhere\)"):
        check_writable(tmp_path / "gone" / "run", "runs_root=R")
    # Hydra makes "~/runs" under the working folder (it does not expand ~): that is the folder checked
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "gone"))
    check_writable(Path("~/runs"), "runs_root=~/runs")


def test_an_output_folder_that_cannot_be_made_is_refused_and_a_writable_one_is_left_as_it_was(tmp_path):
    with pytest.raises(ConfigError, match=r"^hydra.run.dir: cannot write in /proc \(.*\), so /proc/x/y cannot be made; "
                                          r"set hydra.run.dir=<a folder you can write>$"):
        check_writable(Path("/proc/x/y"), "hydra.run.dir")
    check_writable(tmp_path / "new" / "run", "runs_root")
    check_writable(tmp_path, "runs_root")
    assert list(tmp_path.iterdir()) == []  # the probe leaves nothing, and makes none of the folders


def test_a_failed_run_without_a_checkpoint_starts_over(tmp_path):
    write(tmp_path / RESULT_FILE, {"status": "failed"})
    plan = plan_run(tmp_path, CONFIG)
    assert plan.action == "fresh" and plan.previous.status == "failed"


def test_a_corrupt_result_is_redone_with_a_warning(tmp_path, capsys):
    (tmp_path / RESULT_FILE).write_text("{half a rec")
    assert plan_run(tmp_path, CONFIG).action == "fresh"
    assert "ffnbench: warning:" in capsys.readouterr().err


def test_a_directory_of_another_config_is_refused(tmp_path):
    write(tmp_path / RUN_CONFIG_FILE, {**CONFIG, "optim": {"lr": 0.01}})
    with pytest.raises(RunDirError, match=r"holds a run with a different config \(optim.lr: 0.01 → 0.003\)"):
        plan_run(tmp_path, CONFIG)


def test_an_unreadable_run_config_is_refused(tmp_path):
    (tmp_path / RUN_CONFIG_FILE).write_text("[]")
    with pytest.raises(RunDirError, match=f"delete {tmp_path / RUN_CONFIG_FILE}"):
        plan_run(tmp_path, CONFIG)


def test_a_checkpoint_of_another_config_is_not_resumed(tmp_path):
    checkpoint(tmp_path, {**CONFIG, "seed": 1}, step=10)
    with pytest.raises(RunDirError, match=r"was written by a different config \(seed\); not resuming it"):
        plan_run(tmp_path, CONFIG)


def test_an_unreadable_checkpoint_is_refused(tmp_path):
    last_checkpoint(tmp_path).parent.mkdir(parents=True)
    last_checkpoint(tmp_path).write_bytes(b"not a checkpoint")
    with pytest.raises(RunDirError, match="cannot be read .*delete it to start this run over"):
        plan_run(tmp_path, CONFIG)


def test_run_dir_is_required_outside_hydra():
    from omegaconf import OmegaConf

    with pytest.raises(ConfigError, match="run_dir: not set"):
        resolve_run_dir(OmegaConf.create({"run_dir": None}))
    assert resolve_run_dir(OmegaConf.create({"run_dir": "/tmp/x/../y"})) == Path("/tmp/y")


def hydra_start(run_dir: Path) -> Path:
    """What Hydra writes in a run directory before the job starts."""
    (run_dir / ".hydra").mkdir(parents=True)
    for name in ("config.yaml", "hydra.yaml", "overrides.yaml"):
        (run_dir / ".hydra" / name).write_text("x: 1\n")
    (run_dir / "train.log").write_text("")
    return run_dir


def test_a_refused_start_removes_what_hydra_made_and_the_empty_parents(tmp_path):
    run_dir = hydra_start(tmp_path / "runs" / "exp" / "gelu-s0")
    assert remove_failed_start(run_dir, {"train.log"}, stop_at=tmp_path / "runs")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs"] and not any((tmp_path / "runs").iterdir())


def test_a_refused_start_keeps_the_neighbours(tmp_path):
    run_dir = hydra_start(tmp_path / "runs" / "exp" / "gelu-s0")
    (tmp_path / "runs" / "exp" / "relu-s0").mkdir()
    assert remove_failed_start(run_dir, {"train.log"}, stop_at=tmp_path / "runs")
    assert [p.name for p in (tmp_path / "runs" / "exp").iterdir()] == ["relu-s0"]


@pytest.mark.parametrize("work", [RESULT_FILE, RUN_CONFIG_FILE, "checkpoints/last.ckpt", "metrics.csv",
                                  ".hydra/notes.txt"])
def test_a_directory_that_holds_work_is_kept(tmp_path, work):
    run_dir = hydra_start(tmp_path / "run")
    (run_dir / work).parent.mkdir(parents=True, exist_ok=True)
    (run_dir / work).write_text("{}")
    assert not remove_failed_start(run_dir, {"train.log"}, stop_at=tmp_path)
    assert (run_dir / work).exists() and (run_dir / ".hydra" / "config.yaml").exists()


# ---- the resolved device and precision decide identity -------------------------------------------------------

CPU_RUN = {**CONFIG, "trainer": {**CONFIG["trainer"], "accelerator": "cpu", "precision": "32-true"}}
GPU_RUN = {**CONFIG, "trainer": {**CONFIG["trainer"], "accelerator": "gpu", "precision": "bf16-mixed"}}
OLD_RUN = {**CONFIG, "trainer": {**CONFIG["trainer"], "accelerator": "auto", "precision": "auto"}}  # before


def test_a_finished_cpu_run_is_not_skipped_by_a_gpu_run(tmp_path):
    write(tmp_path / RUN_CONFIG_FILE, CPU_RUN)
    write(tmp_path / RESULT_FILE, {"status": "finished"})
    with pytest.raises(RunDirError, match=r"trainer\.accelerator: 'cpu' → 'gpu'; trainer\.precision: '32-true' → "
                                          r"'bf16-mixed'"):
        plan_run(tmp_path, GPU_RUN)
    assert plan_run(tmp_path, CPU_RUN).action == "skip"


def test_a_checkpoint_is_not_resumed_under_another_precision(tmp_path):
    checkpoint(tmp_path, CPU_RUN, step=10)
    with pytest.raises(RunDirError, match=r"different config \(trainer\.precision\)"):
        plan_run(tmp_path, {**CPU_RUN, "trainer": {**CPU_RUN["trainer"], "precision": "bf16-mixed"}})
    assert plan_run(tmp_path, CPU_RUN).action == "resume"


def test_an_old_record_is_the_cpu_fp32_run_it_was(tmp_path):
    write(tmp_path / RUN_CONFIG_FILE, OLD_RUN)
    write(tmp_path / RESULT_FILE, {"status": "finished"})
    assert plan_run(tmp_path, CPU_RUN).action == "skip"
    with pytest.raises(RunDirError):
        plan_run(tmp_path, GPU_RUN)


def test_what_the_planner_cannot_resolve_is_left_to_the_run(tmp_path):
    """Planning a SLURM sweep on a login node: the node's GPU decides the precision; the planner compares the rest."""
    write(tmp_path / RUN_CONFIG_FILE, GPU_RUN)
    write(tmp_path / RESULT_FILE, {"status": "finished"})
    unknown = {**CONFIG, "trainer": {**CONFIG["trainer"], "accelerator": "gpu", "precision": "auto"}}
    assert plan_run(tmp_path, unknown, undecided=("trainer.precision",)).action == "skip"
    with pytest.raises(RunDirError):
        plan_run(tmp_path, {**unknown, "seed": 5}, undecided=("trainer.precision",))


# ---- one launch at a time: the run directory's lock --------------------------------------------------------


def test_a_run_held_by_another_process_names_its_holder(tmp_path, hold_run):
    run_dir = tmp_path / "run"
    assert lock_holder(run_dir) is None  # nothing there: nobody holds it, and asking creates nothing
    assert not run_dir.exists()
    holder_process = hold_run(run_dir)
    holder = lock_holder(run_dir)
    assert (holder.host, holder.pid) == (platform.node(), holder_process.pid)
    assert f"on {platform.node()} (pid {holder_process.pid}" in str(holder)
    lock = RunLock(run_dir)
    assert lock.acquire(retries=1) == holder  # a second launch is told who runs it
    assert lock_holder(run_dir) == holder  # asking did not take it away
    holder_process.kill()
    holder_process.wait()
    assert lock_holder(run_dir) is None  # a killed holder holds nothing: the lock went with its process
    assert lock.acquire() is None and (run_dir / ".running").exists()
    lock.release()
    assert sorted(p.name for p in run_dir.iterdir()) == []  # the lock file goes with the lock


def test_a_lock_on_a_new_directory_leaves_nothing_behind(tmp_path):
    run_dir = tmp_path / "runs" / "new"
    lock = RunLock(run_dir)
    assert lock.acquire() is None and run_dir.is_dir()
    lock.release()
    assert not (tmp_path / "runs").exists() and tmp_path.is_dir()  # only what the lock made is removed
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "result.json").write_text("{}")
    lock = RunLock(kept)
    assert lock.acquire() is None
    lock.release()
    assert [p.name for p in kept.iterdir()] == ["result.json"]
