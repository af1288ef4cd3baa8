"""`python -m ffnbench.sweep`: a micro sweep runs through the real multirun path, reports and reruns as all
skipped, a killed sweep resumes without losing work, the lr-tuning rounds run, a run training elsewhere is
left to it, and bad input is refused before any work."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from fixtures.sweep.runs import (
    BIG,
    EXPECTED_RUNS,
    MICRO_ARMS,
    NO_ARMS,
    PLAIN_LINEAR,
    micro_args,
    results,
    run_sweep,
)

from ffnbench.errors import ConfigError
from ffnbench.runs.result import RESULT_FILE
from ffnbench.runs.rundir import SWEEP_MANIFEST
from ffnbench.sweep import planning
from ffnbench.sweep.cli import parse_grids


def test_a_dry_run_plans_without_importing_lightning(tmp_path):
    code = ("import runpy, sys; sys.argv = ['ffnbench.sweep', 'quick', '--dry-run']; "
            "runpy.run_module('ffnbench.sweep', run_name='__main__'); "
            "print('imported:', sorted(m for m in sys.modules if m.split('.')[0] == 'lightning'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "quick: 17 runs: 0 skipped (already done), 0 resumed, 17 started" in out.stdout
    assert out.stdout.splitlines()[-1] == "imported: []"


def test_grid_selections_are_checked():
    assert parse_grids("0-2,5") == [0, 1, 2, 5] and parse_grids(None) is None
    for bad in ("2-0", "x", "0-2,"):
        with pytest.raises(ConfigError, match=f"--grids {bad}: expected grid indices like 0-2,5"):
            parse_grids(bad)


def _files(folder):
    return {name: (folder / name).read_bytes() for name in ("REPORT.md", "results.jsonl", SWEEP_MANIFEST)}


def test_a_micro_sweep_runs_reports_reruns_as_all_skipped_and_nothing_replaces_its_report_with_less(tmp_path):
    args = ["linear", "--", *micro_args(tmp_path), *PLAIN_LINEAR, "seed=0,1"]
    first = run_sweep(*args, tmp=tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "6 runs: 0 skipped (already done), 0 resumed, 6 started" in first.stdout
    done = results(tmp_path, "linear")
    assert len(done) == 6 and {r["status"] for r in done.values()} == {"finished"}
    assert "6 finished" in first.stdout
    folder = tmp_path / "runs" / "linear"
    report = folder / "REPORT.md"
    assert report.exists() and "C13" in report.read_text()
    manifest = json.loads((folder / SWEEP_MANIFEST).read_text())
    assert manifest["experiment"] == "linear" and len(manifest["runs"]) == 6

    again = run_sweep(*args, tmp=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "6 runs: 6 skipped (already done), 0 resumed, 0 started" in again.stdout
    assert "nothing to train" in again.stdout
    assert results(tmp_path, "linear") == done  # untouched

    # Issue 44: bad input in a folder that holds a finished sweep stops before any job, one line and exit 2, and
    # leaves its report, results and manifest byte for byte, and no new run folder
    before, folders = _files(folder), sorted(p.name for p in folder.iterdir())
    bad = run_sweep(*args, "data.batch_size=0", tmp=tmp_path)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) <= 3, bad.stdout[-2000:] + bad.stderr[-2000:]
    assert "would be refused when it starts (and 5 more jobs of this sweep): data.batch_size: must be a positive " \
           "integer, got 0" in bad.stderr
    assert _files(folder) == before and sorted(p.name for p in folder.iterdir()) == folders

    # a sweep of part of the folder's runs (seed 0 only) reports every finished run of the folder, not only its own
    part = run_sweep("linear", "--", *micro_args(tmp_path), *PLAIN_LINEAR, "seed=0", tmp=tmp_path)
    assert part.returncode == 0, part.stdout[-3000:] + part.stderr[-3000:]
    assert "3 runs: 3 skipped (already done), 0 resumed, 0 started" in part.stdout
    assert len((folder / "results.jsonl").read_text().splitlines()) == 6
    assert len(json.loads((folder / SWEEP_MANIFEST).read_text())["runs"]) == 6
    assert "6 finished" not in part.stdout and "3 finished" in part.stdout  # its own summary: its 3 runs


def test_bad_input_is_one_line_and_exit_2_before_any_job_or_folder(tmp_path):
    """Issue 44: `python -m ffnbench.sweep quick -- data.batch_size=0` started all 17 jobs, each refused."""
    out = run_sweep("quick", "--", "data.batch_size=0", f"runs_root={tmp_path / 'runs'}",
                    f"data.cache_dir={tmp_path / 'cache'}", tmp=tmp_path)
    assert out.returncode == 2 and out.stdout == "" and len(out.stderr.splitlines()) <= 3, out.stderr[-3000:]
    assert out.stderr.startswith("ffnbench: error: job relu-b4-nobias-") and "(and 16 more jobs of this sweep): " \
        "data.batch_size: must be a positive integer, got 0" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no run folder, no data cache, no manifest


def test_a_setting_only_train_checks_stops_the_sweep_before_it_launches(tmp_path):
    """What the plan cannot judge without Lightning or the machine (CUDA graphs on a CPU) is judged by train's own
    check_run on each distinct config before any job starts (the dry run does not: it imports neither)."""
    args = [*micro_args(tmp_path), *PLAIN_LINEAR, "trainer.compile=true", "trainer.compile_mode=reduce-overhead"]
    out = run_sweep("linear", "--", *args, tmp=tmp_path)
    assert out.returncode == 2 and len(out.stderr.splitlines()) <= 3, out.stdout[-2000:] + out.stderr[-2000:]
    assert "would be refused when it starts: trainer.compile_mode=reduce-overhead: CUDA graphs need a CUDA GPU" \
        in out.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cache").exists()


def test_a_job_refused_when_it_starts_is_shown_with_why_and_wandb_says_one_line_for_the_sweep(tmp_path):
    """Issue 42 (10b): a job its run refuses when it starts (here its validation set is larger than the corpus's val
    split: only the prepared corpus tells) has no folder and no result.json; the summary says why, not "missing".
    Issue 44 (7d): wandb's three lines a run are left out; one line names the sweep's offline runs."""
    grids = ("hydra.sweeper.grids=[{ffn: gelu, seed: 0, data.val_tokens: 256}, "
             "{ffn: relu, seed: 0, data.val_tokens: 1000000}]")
    args = [*(a for a in micro_args(tmp_path) if not a.startswith(("logger=", "data.val_tokens="))), "logger=wandb",
            "logger.wandb.mode=offline", *NO_ARMS, "hydra.sweeper.params=null", grids]
    out = run_sweep("linear", "--", *args, tmp=tmp_path)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    runs, _ = planning.plan("linear", None, args)
    refused = next(r for r in runs if "data.val_tokens=1000000" in r.overrides)
    assert not refused.run_dir.exists()
    why = "data.val_tokens=1000000: the val split of data=shakespeare"
    assert f"refused before it started (no run folder): {refused.run_dir.name}: {why}" in out.stdout
    assert "1 finished, 1 refused" in out.stdout and "missing" not in out.stdout
    assert "refused before it started (no run folder): " + why in out.stderr  # the training process's summary too
    wandb_lines = [line for line in (out.stdout + out.stderr).splitlines() if line.startswith("wandb:")]
    assert len(wandb_lines) <= 1 and "1 runs logged offline; upload them with `wandb sync" in wandb_lines[0]


@pytest.mark.slow  # minutes of end-to-end training on 2 cores; `make test-slow`
def test_a_killed_sweep_resumes_and_loses_nothing(tmp_path):
    # Two runs, long enough to be killed in the second one after its first checkpoint.
    overrides = [*micro_args(tmp_path), "ffn=relu", "seed=0", "trainer.max_steps=200", "trainer.val_every=50",
                 "trainer.ckpt_every=10"]
    runs, _ = planning.plan("quick", None, overrides)
    assert len(runs) == 4
    first, second = runs[0].run_dir, runs[1].run_dir
    proc = subprocess.Popen([sys.executable, "-m", "ffnbench.train", "-m", "experiment=quick", *overrides],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "WANDB_MODE": "offline"}, start_new_session=True)
    deadline = time.time() + 300
    while not (second / "checkpoints" / "last.ckpt").exists():
        assert proc.poll() is None and time.time() < deadline, "the sweep ended before it could be killed"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished_before = (first / RESULT_FILE).read_text()
    assert json.loads(finished_before)["status"] == "finished"

    out = run_sweep("quick", "--", *overrides, tmp=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "4 runs: 1 skipped (already done), 1 resumed, 2 started" in out.stdout
    assert (first / RESULT_FILE).read_text() == finished_before  # the finished run was not touched
    resumed = json.loads((second / RESULT_FILE).read_text())
    assert resumed["status"] == "finished" and resumed["resumed_from_step"] >= 10
    assert resumed["steps"] == 200 and [c["step"] for c in resumed["curve"]] == [0, 50, 100, 150, 200]


@pytest.mark.slow  # the robust test below runs both stages too (with bracketing); this one adds a second variant
def test_a_two_stage_sweep_tunes_each_variant_then_judges_it_on_fresh_seeds_at_its_lr(tmp_path):
    grids = ("hydra.sweeper.grids=[{ffn: 'relu,gelu', optim.lr: '1e-3,3e-2', seed: 100, tuning: true}, "
             "{ffn: 'relu,gelu', optim.lr: tuned, seed: '0,1'}]")
    args = ["linear", "--", *micro_args(tmp_path), *PLAIN_LINEAR, "hydra.sweeper.params=null", grids]
    out = run_sweep(*args, tmp=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "8 runs: 0 skipped (already done), 0 resumed, 4 started, 4 after the lr-tuning stage" in out.stdout
    assert "lr-tuning round 1 done: 4 runs at their tuned lrs, 0 tuning runs or retries" in out.stdout
    assert "0 of 8 runs done; time left: unknown until a run of this sweep finishes here" in out.stdout
    assert "sweep progress: 4 of 8 runs done; about" in out.stdout  # the first judged run, after the tuning stage
    done = list(results(tmp_path, "linear").values())
    assert len(done) == 8 and {r["status"] for r in done} == {"finished"}
    for act in ("relu", "gelu"):
        tuning = [r for r in done if r["config"]["ffn"]["act"] == act and r["config"]["tuning"]]
        loss = {r["config"]["optim"]["lr"]: r["metrics"]["final_val_loss"] for r in tuning}
        judged = [r for r in done if r["config"]["ffn"]["act"] == act and not r["config"]["tuning"]]
        assert sorted(r["seed"] for r in judged) == [0, 1]
        assert {r["config"]["optim"]["lr"] for r in judged} == {min(loss, key=loss.get)}
    assert "lr tuned on tuning seeds, judged on fresh seeds" in (tmp_path / "runs" / "linear" / "REPORT.md").read_text()

    again = run_sweep(*args, tmp=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "8 runs: 8 skipped (already done), 0 resumed, 0 started" in again.stdout


def test_a_robust_sweep_extends_a_grid_whose_best_lr_is_at_its_edge_then_judges_and_reports_it(tmp_path):
    """The whole robust path on the micro model: 5 lattice lrs × 2 tuning seeds (the short grid), all too small for
    4 steps, so the best is the top one; the planner adds one half-octave step above it (bracket_cap=1) on the same
    seeds, chooses again, and judges at the new lr. Instabilities are recorded per run; the report has the
    shared-lr table and the lr-curve figure. A rerun trains nothing."""
    protocol = ["lr_protocol.robust=true", "lr_protocol.min_lrs=5", "lr_protocol.min_seeds=2",
                "lr_protocol.bracket_cap=1"]
    grids = ("hydra.sweeper.grids=[{ffn: gelu, optim.lr: '0.000125,0.000177,0.00025,0.000354,0.0005', seed: '100,101', "
             "tuning: true}, {ffn: gelu, optim.lr: tuned, seed: 0}]")
    args = ["linear", "--", *micro_args(tmp_path), *PLAIN_LINEAR, "hydra.sweeper.params=null", *protocol, grids]
    out = run_sweep(*args, tmp=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "11 runs: 0 skipped (already done), 0 resumed, 10 started, 1 after the lr-tuning stage" in out.stdout
    assert "lr-tuning round 1 done: 0 runs at their tuned lrs, 2 tuning runs or retries" in out.stdout
    done = list(results(tmp_path, "linear").values())
    assert len(done) == 13 and {r["status"] for r in done} == {"finished"}
    extended = sorted(r["seed"] for r in done if r["config"]["optim"]["lr"] == 0.000707 and r["config"]["tuning"])
    assert extended == [100, 101]  # the extension: the same tuning seeds, one step above the grid
    judged = [r for r in done if not r["config"]["tuning"]]
    assert [r["config"]["optim"]["lr"] for r in judged] == [0.000707]
    for r in done:  # every run records its instabilities (none here) and its training curve
        assert r["instabilities"] == [] and r["train_curve"] and r["data"]["unigram_loss"] > 0
    report = (tmp_path / "runs" / "linear" / "REPORT.md").read_text()
    assert "optimum not bracketed (at the upper edge of 6 lrs)" in report  # the cap stopped it at the edge
    assert "## Learning-rate grids" in report and "## Instabilities" in report
    assert list((tmp_path / "runs" / "linear" / "figures").glob("lr_curves*.png"))

    again = run_sweep(*args, tmp=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "13 runs: 13 skipped (already done), 0 resumed, 0 started" in again.stdout


def test_a_sweep_refuses_a_thin_robust_grid_before_any_run(tmp_path):
    grids = ("hydra.sweeper.grids=[{ffn: gelu, optim.lr: '1e-3,2e-3', seed: 100, tuning: true}, "
             "{ffn: gelu, optim.lr: tuned, seed: 0}]")
    out = run_sweep("linear", "--", *micro_args(tmp_path), *PLAIN_LINEAR, "hydra.sweeper.params=null",
                    "lr_protocol.robust=true",
                    grids, tmp=tmp_path)
    assert out.returncode == 2 and not (tmp_path / "runs" / "linear").exists()
    assert "its tuning grid has 2 lrs (0.001, 0.002); the robust lr protocol asks for at least 7" in out.stderr
    out = run_sweep("linear", "--", *micro_args(tmp_path), *PLAIN_LINEAR, "lr_protocol.bracket_cap=-1", tmp=tmp_path)
    assert out.returncode == 2 and "lr_protocol.bracket_cap: must be an integer ≥ 0" in out.stderr


def test_unknown_experiment_lists_the_known_ones(tmp_path):
    out = run_sweep("nope", tmp=tmp_path)
    assert out.returncode == 2
    assert "EXP=nope: no such experiment; known experiments: activations" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_sweep_whose_runs_root_cannot_be_written_is_one_line_and_exit_2_before_any_run(tmp_path):
    (tmp_path / "afile").write_text("")
    args = [*micro_args(tmp_path), *PLAIN_LINEAR, "seed=0", "ffn=gelu", f"runs_root={tmp_path / 'afile'}"]
    out = run_sweep("linear", "--", *args, tmp=tmp_path)
    assert out.returncode == 2, out.stderr[-3000:]
    assert out.stderr.startswith(f"ffnbench: error: runs_root={tmp_path / 'afile'}: {tmp_path / 'afile'} is a file, "
                                 "not a folder") and out.stderr.count("\n") == 1, out.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # no data cache, nothing trained


def test_ffnbench_sweep_is_a_command_and_its_help_lists_presets_not_their_bases(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ffnbench", "sweep", "--help"], capture_output=True, text=True,
                         cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("usage: ffnbench sweep") and "one of: activations," in out.stdout
    assert "_gpu" not in out.stdout
    train_help = subprocess.run([sys.executable, "-m", "ffnbench.train", "--help"], capture_output=True, text=True,
                                cwd=tmp_path, timeout=300)
    assert train_help.returncode == 0, train_help.stderr[-2000:]
    listed = train_help.stdout.split("== Config ==")[0]  # the groups, before the config itself
    groups = dict(line.split(": ", 1) for line in listed.splitlines() if ": " in line)
    assert groups["experiment"].split(", ") == planning.experiments()  # `_gpu.yaml` is a base of presets, not one
    assert "swiglu" in groups["ffn"].split(", ") and "micro" in groups["model"].split(", ")


def test_a_run_dir_holding_another_config_stops_the_sweep_before_it_starts(tmp_path):
    args = [*micro_args(tmp_path), *PLAIN_LINEAR, "seed=0", "ffn=gelu"]
    runs, _ = planning.plan("linear", None, args)
    runs[0].run_dir.mkdir(parents=True)
    (runs[0].run_dir / "run_config.json").write_text(json.dumps({"optim": {"lr": 1.0}}))
    out = run_sweep("linear", "--", *args, tmp=tmp_path)
    assert out.returncode == 2
    assert "hold runs of a different config and would not be reused" in out.stderr
    assert not (runs[0].run_dir / RESULT_FILE).exists()


@pytest.mark.slow
@pytest.mark.parametrize("experiment", sorted(set(EXPECTED_RUNS) - {"quick", *BIG}))
def test_every_claim_experiment_runs_with_micro_overrides(experiment, tmp_path):
    first_arm = ["hydra.sweeper.arms.fan_in_1x.enabled=false", "hydra.sweeper.arms.tokens_4x.enabled=false",
                 "hydra.sweeper.arms.size_base.enabled=false"]
    extra = [*MICRO_ARMS, *first_arm] if experiment != "lr" else ["seed=0"]
    out = run_sweep(experiment, "--confirm", "--", *micro_args(tmp_path), *extra, tmp=tmp_path, timeout=3600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    done = results(tmp_path, experiment)
    assert done and {r["status"] for r in done.values()} == {"finished"}
    assert (tmp_path / "runs" / experiment / "REPORT.md").exists()


@pytest.mark.slow  # minutes of end-to-end training on 2 cores; `make test-slow`
def test_a_run_training_elsewhere_is_planned_as_running_and_not_started(tmp_path, hold_run):
    args = [*micro_args(tmp_path), *PLAIN_LINEAR, "seed=0", "ffn=gelu,swiglu"]
    runs, _ = planning.plan("linear", None, args)
    held = runs[0].run_dir
    holder = hold_run(held)
    runs, _ = planning.plan("linear", None, args)
    assert [(r.run_dir, r.action) for r in runs] == [(held, "running"), (runs[1].run_dir, "start")]
    assert f"(pid {holder.pid}" in runs[0].note
    out = run_sweep("linear", "--no-report", "--", *args, tmp=tmp_path)
    assert "2 runs: 0 skipped (already done), 0 resumed, 1 started, 1 running elsewhere" in out.stdout
    assert "not started: 1 runs are training elsewhere" in out.stdout and f"(pid {holder.pid}" in out.stdout
    assert held.name in out.stdout  # the sweep named it and where it runs, and did not launch it
    assert not {RESULT_FILE, "run_config.json", "checkpoints"} & {p.name for p in held.iterdir()}
    assert (runs[1].run_dir / RESULT_FILE).exists()
    assert out.returncode == 1  # the sweep is not done while one of its runs is still training elsewhere


def test_ctrl_c_during_a_round_waits_for_the_training_process_to_record_its_run(tmp_path):
    """A terminal's Ctrl-C reaches the sweep and its training process alike. The training process takes a moment to
    save and record (here 1 s); the sweep waits for it rather than killing it, then exits 130."""
    import os
    import signal
    import subprocess
    import sys
    import time

    child = tmp_path / "child.py"
    child.write_text("import pathlib, signal, sys, time\n"
                     "def stop(*_):\n    time.sleep(1.0)\n    pathlib.Path(sys.argv[1]).write_text('recorded')\n"
                     "    sys.exit(130)\n"
                     "signal.signal(signal.SIGINT, stop)\npathlib.Path(sys.argv[2]).write_text('ready')\n"
                     "time.sleep(60)\n")
    driver = tmp_path / "driver.py"
    driver.write_text("import sys\nfrom pathlib import Path\nfrom rich.console import Console\n"
                      "from ffnbench.sweep import cli\n"
                      "try:\n"
                      f"    cli._launch([sys.executable, {str(child)!r}, {str(tmp_path / 'record')!r}, "
                      f"{str(tmp_path / 'ready')!r}], [], Path({str(tmp_path)!r}), Console())\n"
                      "except cli.SweepInterrupted:\n    sys.exit(130)\n")
    proc = subprocess.Popen([sys.executable, str(driver)], start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (tmp_path / "ready").exists():
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # the terminal's Ctrl-C: every process of the foreground group
    out, err = proc.communicate(timeout=60)
    assert (tmp_path / "record").exists(), err[-2000:]
    assert proc.returncode == 130, err[-2000:]
    assert "saving its checkpoint" in out
