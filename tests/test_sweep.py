"""Sweeps: every experiment expands to the runs it means, a micro sweep runs through the real multirun path,
a killed sweep resumes without losing work, the launchers run, and bad input is refused before any work."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from fixtures.report.synthetic import make_record
from omegaconf import OmegaConf
from rich.console import Console

from ffnbench import sweep
from ffnbench.config.compose import compose
from ffnbench.config.schema import to_container
from ffnbench.errors import ConfigError
from ffnbench.records import SWEEP_MANIFEST
from ffnbench.result import RESULT_FILE
from hydra_plugins.ffnbench_sweeper.grid_sweeper import expand_grids

REPO = Path(__file__).resolve().parent.parent
EXPECTED_RUNS = {  # the grids of conf/experiment/*.yaml, counted by hand
    "quick": 3 * 3 + 2 * 2 + 2 + 2,
    "activations": 9 * 3 + 3 * 3,  # + the matched-init sensitivity arm
    "widths": 2 * 4 * 3 * 2,
    "sparsity": 5 * 4 * 2,
    "bias": 3 * 2 * 3,
    "depth": 2 * 2 * 3,
    "linear": 3 * 3,
    "lr": 3 * 4 * 2 + 3 * 3,  # tuning stage (4 lrs × seeds 100, 101), then 3 judged seeds at the tuned lr
    "scale": 3 * 3 * 2,
    "full": 10 * 3 + 2 * 3 * 3 + 2 * 4 * 3 + 5 * 3 * 3 + 3 * 3 + 2 * 2 * 3 + 3 * 3,
    # tuning (3 lrs × seeds 100, 101 for the headline, 100 elsewhere) + judged seeds, per arm: headline, seeds 6-9
    # of gelu, swiglu and gelu with bias, bias, widths at fixed d, widths at a fixed budget, the C6 lr grid (judged
    # only), depth 2, matched init, d_model 32
    "cpu_claims": (8 * 6 + 8 * 6) + (2 * 4 + 4) + (3 + 6) + (3 * 3 + 3 * 5) + (4 * 3 + 4 * 5) + 2 * 4 * 3
                  + (2 * 3 + 2 * 5) + (4 * 3 + 4 * 5) + (4 * 3 + 4 * 5),
    # tuning (7 lrs × 3 seeds; the short grids 5 × 2) + judged seeds, per arm: headline (+ relu's C6 lrs), fan_in
    # init, length under both inits, C7, C1 (4 widths), C8, tiny, stability; the planner adds bracketing runs
    "cpu_robust": (8 * 21 + 15 + 8 * 6) + (4 * 21 + 4 * 6) + 2 * (3 * 10 + 3 * 4) + (21 + 6) + (4 * 21 + 4 * 5)
                  + (2 * 21 + 2 * 5) + (3 * 10 + 3 * 4) + (3 * 10 + 3 * 4),
}
BIG = ("full", "cpu_claims", "cpu_robust")  # expanded, not composed job by job (hundreds of runs: slow)


def micro_args(tmp: Path) -> list[str]:
    """Overrides that make any experiment a seconds-long CPU run: micro model, Shakespeare bytes."""
    return ["model=micro", "data=shakespeare", "data.tokenizer=byte", "data.batch_size=4", "data.val_tokens=256",
            "data.final_val_tokens=256",
            "trainer.max_steps=4", "trainer.val_every=2", "trainer.ckpt_every=2", "trainer.progress_bar=false",
            "trainer.accelerator=cpu", "trainer.compile=false", "logger=csv", f"data.cache_dir={tmp / 'cache'}",
            f"runs_root={tmp / 'runs'}"]


def test_every_experiment_is_listed_and_expands_to_its_grid():
    assert set(sweep.experiments()) == set(EXPECTED_RUNS)
    for name, expected in EXPECTED_RUNS.items():
        if name in BIG:
            cfg = compose([f"experiment={name}"], return_hydra_config=True)
            grids = OmegaConf.to_container(cfg.hydra.sweeper.grids)
            assert len(expand_grids(None, grids, [f"experiment={name}"])) == expected
            continue
        runs, cfg = sweep.plan(name, None, [])
        assert len(runs) == expected, name
        assert len({r.run_dir for r in runs}) == expected, f"{name}: two runs share a directory"
        assert all(r.run_dir.parent == Path("runs") / name for r in runs)
        assert cfg.name == name


def test_the_quick_grid_covers_every_factor_of_the_mission():
    runs, _ = sweep.plan("quick", None, [])
    names = {r.run_dir.name for r in runs}
    for act in ("relu", "gelu", "swiglu"):
        assert {f"{act}-b4-nobias-s0", f"{act}-b4-nobias-s1"} <= names  # matched budget, ≥ 2 seeds
    assert {"gelu-w2-nobias-s0", "gelu-w8-nobias-s0", "gelu-b4-bias-s0"} <= names  # widths 2/4/8, bias on/off


def test_command_line_overrides_win_over_the_grid():
    runs, _ = sweep.plan("activations", None, ["seed=0", "ffn=relu,gelu"])
    assert sorted(r.run_dir.name for r in runs) == [  # both grids: the main one and the matched-init arm
        "gelu-b4-nobias-model.ffn_init=matched-s0", "gelu-b4-nobias-s0",
        "relu-b4-nobias-model.ffn_init=matched-s0", "relu-b4-nobias-s0"]


def test_a_dry_run_plans_without_importing_lightning(tmp_path):
    code = ("import runpy, sys; sys.argv = ['ffnbench.sweep', 'quick', '--dry-run']; "
            "runpy.run_module('ffnbench.sweep', run_name='__main__'); "
            "print('imported:', sorted(m for m in sys.modules if m.split('.')[0] == 'lightning'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "quick: 17 runs: 0 skipped (already done), 0 resumed, 17 started" in out.stdout
    assert out.stdout.splitlines()[-1] == "imported: []"


def test_the_outcome_counts_what_each_result_says(tmp_path):
    runs = [sweep.PlannedRun([], tmp_path / name, "start") for name in ("a", "b", "c", "d")]
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / RESULT_FILE).write_text(json.dumps({"status": "finished", "tokens": 100, "wall_time_s": 2.0,
                                                          "metrics": {"final_val_loss": 1.25}}))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / RESULT_FILE).write_text(json.dumps({"status": "diverged", "tokens": 50}))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / RESULT_FILE).write_text("{")
    console = Console(width=140, record=True)
    assert sweep.print_outcome(runs, console) == {"finished": 1, "diverged": 1, "corrupt": 1, "missing": 1}
    text = console.export_text()
    assert "1.2500" in text
    assert "runs by status: 1 corrupt, 1 diverged, 1 finished, 1 missing; 150 tokens; 2 s of training wall time" in text


def run_sweep(*args, tmp: Path, timeout=600):
    env = {**os.environ, "WANDB_MODE": "offline"}
    return subprocess.run([sys.executable, "-m", "ffnbench.sweep", *args], capture_output=True, text=True,
                          env=env, timeout=timeout, cwd=tmp)


def results(tmp: Path, experiment: str) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in (tmp / "runs" / experiment).glob(f"*/{RESULT_FILE}")}


def test_a_micro_sweep_runs_reports_and_reruns_as_all_skipped(tmp_path):
    args = ["linear", "--", *micro_args(tmp_path), "seed=0,1"]
    first = run_sweep(*args, tmp=tmp_path)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    assert "6 runs: 0 skipped (already done), 0 resumed, 6 started" in first.stdout
    done = results(tmp_path, "linear")
    assert len(done) == 6 and {r["status"] for r in done.values()} == {"finished"}
    assert "6 finished" in first.stdout
    report = tmp_path / "runs" / "linear" / "REPORT.md"
    assert report.exists() and "C13" in report.read_text()
    manifest = json.loads((tmp_path / "runs" / "linear" / SWEEP_MANIFEST).read_text())
    assert manifest["experiment"] == "linear" and len(manifest["runs"]) == 6

    again = run_sweep(*args, tmp=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "6 runs: 6 skipped (already done), 0 resumed, 0 started" in again.stdout
    assert "nothing to train" in again.stdout
    assert results(tmp_path, "linear") == done  # untouched


@pytest.mark.slow  # minutes of end-to-end training on 2 cores; `make test-slow`
def test_a_killed_sweep_resumes_and_loses_nothing(tmp_path):
    # Two runs, long enough to be killed in the second one after its first checkpoint.
    overrides = [*micro_args(tmp_path), "ffn=relu", "seed=0", "trainer.max_steps=200", "trainer.val_every=50",
                 "trainer.ckpt_every=10"]
    runs, _ = sweep.plan("quick", None, overrides)
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


def test_a_two_stage_sweep_tunes_each_variant_then_judges_it_on_fresh_seeds_at_its_lr(tmp_path):
    grids = ("hydra.sweeper.grids=[{ffn: 'relu,gelu', optim.lr: '1e-3,3e-2', seed: 100, tuning: true}, "
             "{ffn: 'relu,gelu', optim.lr: tuned, seed: '0,1'}]")
    args = ["linear", "--", *micro_args(tmp_path), "hydra.sweeper.params=null", grids]
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
    args = ["linear", "--", *micro_args(tmp_path), "hydra.sweeper.params=null", *protocol, grids]
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
    out = run_sweep("linear", "--", *micro_args(tmp_path), "hydra.sweeper.params=null", "lr_protocol.robust=true",
                    grids, tmp=tmp_path)
    assert out.returncode == 2 and not (tmp_path / "runs" / "linear").exists()
    assert "its tuning grid has 2 lrs (0.001, 0.002); the robust lr protocol asks for at least 7" in out.stderr
    out = run_sweep("linear", "--", *micro_args(tmp_path), "lr_protocol.bracket_cap=-1", tmp=tmp_path)
    assert out.returncode == 2 and "lr_protocol.bracket_cap: must be an integer ≥ 0" in out.stderr


def test_submitit_local_launches_and_collects(tmp_path):
    out = run_sweep("linear", "--launcher", "submitit_local", "--", *micro_args(tmp_path), "seed=0",
                    "ffn=gelu,swiglu", "hydra.launcher.timeout_min=10", tmp=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert {r["status"] for r in results(tmp_path, "linear").values()} == {"finished"}
    assert len(results(tmp_path, "linear")) == 2
    assert list((tmp_path / "runs" / "linear" / ".submitit").glob("*/*_result.pkl"))  # submitit collected them


@pytest.mark.slow  # minutes of end-to-end training on 2 cores; `make test-slow`
def test_joblib_runs_two_at_a_time(tmp_path):
    out = run_sweep("linear", "--launcher", "joblib", "--", *micro_args(tmp_path), "seed=0", "ffn=gelu,swiglu",
                    "hydra.launcher.n_jobs=2", tmp=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    done = results(tmp_path, "linear")
    assert len(done) == 2 and {r["status"] for r in done.values()} == {"finished"}
    assert {r["hardware"]["torch_threads"] for r in done.values()} == {max(1, (os.cpu_count() or 1) // 2)}


def test_unknown_experiment_lists_the_known_ones(tmp_path):
    out = run_sweep("nope", tmp=tmp_path)
    assert out.returncode == 2
    assert "EXP=nope: no such experiment; known experiments: activations" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_missing_launcher_plugin_names_the_package(monkeypatch):
    monkeypatch.setattr(sweep.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="needs the hydra-joblib-launcher package"):
        sweep.launcher_overrides("joblib")
    with pytest.raises(ConfigError, match="unknown launcher"):
        sweep.launcher_overrides("kubernetes")


def test_a_big_cpu_grid_needs_confirmation(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep, "MAX_CPU_RUNS", 8)  # the real threshold, 30, works the same on a bigger grid
    runs, cfg = sweep.plan("linear", None, ["trainer.accelerator=cpu", f"runs_root={tmp_path}"])
    with pytest.raises(ConfigError, match=r"would train 9 runs on the CPU \(more than 8\).*CONFIRM=1"):
        sweep.check_plan(runs, cfg, None, confirmed=False)
    sweep.check_plan(runs, cfg, None, confirmed=True)


def test_slurm_needs_its_settings(tmp_path):
    runs, cfg = sweep.plan("linear", "submitit_slurm", [f"runs_root={tmp_path}"])
    with pytest.raises(ConfigError, match=r"needs SLURM settings: set slurm\.partition"):
        sweep.check_plan(runs, cfg, "submitit_slurm", confirmed=False)
    runs, cfg = sweep.plan("linear", "submitit_slurm", [f"runs_root={tmp_path}", "slurm.partition=gpu"])
    sweep.check_plan(runs, cfg, "submitit_slurm", confirmed=False)
    assert cfg.hydra.launcher.partition == "gpu" and cfg.hydra.launcher.gpus_per_node == cfg.trainer.devices


def test_a_run_dir_holding_another_config_stops_the_sweep_before_it_starts(tmp_path):
    args = [*micro_args(tmp_path), "seed=0", "ffn=gelu"]
    runs, _ = sweep.plan("linear", None, args)
    runs[0].run_dir.mkdir(parents=True)
    (runs[0].run_dir / "run_config.json").write_text(json.dumps({"optim": {"lr": 1.0}}))
    out = run_sweep("linear", "--", *args, tmp=tmp_path)
    assert out.returncode == 2
    assert "hold runs of a different config and would not be reused" in out.stderr
    assert not (runs[0].run_dir / RESULT_FILE).exists()


@pytest.mark.slow
@pytest.mark.parametrize("experiment", sorted(set(EXPECTED_RUNS) - {"quick", *BIG}))
def test_every_claim_experiment_runs_with_micro_overrides(experiment, tmp_path):
    out = run_sweep(experiment, "--", *micro_args(tmp_path), "seed=0", tmp=tmp_path, timeout=1800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    done = results(tmp_path, experiment)
    assert done and {r["status"] for r in done.values()} == {"finished"}
    assert (tmp_path / "runs" / experiment / "REPORT.md").exists()


# ---- GPU nodes and clusters, planned on the CPU -----------------------------------------------------------------


@pytest.fixture
def cpu_only(monkeypatch):
    """A machine without a GPU (a login node, this one)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def test_a_slurm_sweep_planned_on_a_cpu_login_node_is_not_refused(tmp_path, monkeypatch, cpu_only):
    """The runs train on the cluster's GPU nodes; only runs that really train on a CPU count towards CONFIRM=1."""
    monkeypatch.setattr(sweep, "MAX_CPU_RUNS", 8)
    args = [f"runs_root={tmp_path}", "slurm.partition=gpu"]
    for experiment in ("quick", "activations"):  # trainer=auto, and a GPU experiment (trainer.accelerator=gpu)
        runs, cfg = sweep.plan(experiment, "submitit_slurm", args)
        sweep.check_plan(runs, cfg, "submitit_slurm", confirmed=False)
    runs, cfg = sweep.plan("quick", "submitit_slurm", [*args, "trainer.accelerator=cpu"])
    with pytest.raises(ConfigError, match=r"would train 17 runs on the CPU"):  # CPU jobs on the cluster: they count
        sweep.check_plan(runs, cfg, "submitit_slurm", confirmed=False)
    runs, cfg = sweep.plan("quick", None, [f"runs_root={tmp_path}"])  # trained here, on this CPU: they count
    with pytest.raises(ConfigError, match=r"would train 17 runs on the CPU"):
        sweep.check_plan(runs, cfg, None, confirmed=False)


def test_a_gpu_sweep_started_on_a_machine_without_a_gpu_is_refused_before_it_starts(tmp_path, cpu_only):
    runs, cfg = sweep.plan("bias", "joblib", [f"runs_root={tmp_path}"])
    with pytest.raises(ConfigError, match=r"^trainer\.accelerator=gpu: no CUDA GPU is visible here \(.+\)"):
        sweep.check_plan(runs, cfg, "joblib", confirmed=False)
    runs, cfg = sweep.plan("bias", None, [f"runs_root={tmp_path}", "trainer.accelerator=cpu"])
    sweep.check_plan(runs, cfg, None, confirmed=True)  # on the CPU on purpose


def test_submitit_local_gets_the_gpus(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: ["sm_90"])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    _, cfg = sweep.plan("linear", "submitit_local", [f"runs_root={tmp_path}"])
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("LocalLauncher")
    assert (launcher.gpus_per_node, launcher.tasks_per_node, launcher.timeout_min) == (4, 1, cfg.slurm.timeout_min)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    runs, cfg = sweep.plan("linear", "submitit_local", [f"runs_root={tmp_path}"])
    with pytest.raises(ConfigError, match=r"submitit_local gives its jobs GPUs 0\.\.n-1 .*'2,3'"):
        sweep.check_plan(runs, cfg, "submitit_local", confirmed=False)


@pytest.mark.slow  # minutes of end-to-end training on 2 cores; `make test-slow`
def test_a_run_training_elsewhere_is_planned_as_running_and_not_started(tmp_path, hold_run):
    args = [*micro_args(tmp_path), "seed=0", "ffn=gelu,swiglu"]
    runs, _ = sweep.plan("linear", None, args)
    held = runs[0].run_dir
    holder = hold_run(held)
    runs, _ = sweep.plan("linear", None, args)
    assert [(r.run_dir, r.action) for r in runs] == [(held, "running"), (runs[1].run_dir, "start")]
    assert f"(pid {holder.pid}" in runs[0].note
    out = run_sweep("linear", "--no-report", "--", *args, tmp=tmp_path)
    assert "2 runs: 0 skipped (already done), 0 resumed, 1 started, 1 running elsewhere" in out.stdout
    assert "not started: 1 runs are training elsewhere" in out.stdout and f"(pid {holder.pid}" in out.stdout
    assert held.name in out.stdout  # the sweep named it and where it runs, and did not launch it
    assert not {RESULT_FILE, "run_config.json", "checkpoints"} & {p.name for p in held.iterdir()}
    assert (runs[1].run_dir / RESULT_FILE).exists()
    assert out.returncode == 1  # the sweep is not done while one of its runs is still training elsewhere


def test_committed_cpu_records_are_still_the_same_runs(tmp_path, cpu_only):
    """The published quick sweep (records from before the device and precision were stored resolved, `auto`)
    is recognised run for run when planned again on a CPU: every run skipped, none refused."""
    records = [json.loads(line) for line in (REPO / "experiments" / "cpu-quick" / "results.jsonl").open()]
    for record in records:
        run_dir = tmp_path / "quick" / record["run_name"]
        run_dir.mkdir(parents=True)
        (run_dir / "run_config.json").write_text(json.dumps(record["config"]))
        (run_dir / RESULT_FILE).write_text(json.dumps(record))
    assert {r["config"]["trainer"]["precision"] for r in records} == {"auto"}
    runs, _ = sweep.plan("quick", None, [f"runs_root={tmp_path}"])
    assert len(runs) == len(records) and {r.action for r in runs} == {"skip"}


def test_a_slurm_rerun_from_a_login_node_skips_what_gpu_nodes_finished(tmp_path, cpu_only):
    """The login node cannot resolve the nodes' precision: the planner leaves it to the run, and still sees the
    finished runs (stored as gpu / bf16-mixed) as the same runs."""
    args = [f"runs_root={tmp_path}", "slurm.partition=gpu", "seed=0", "ffn=gelu"]
    runs, _ = sweep.plan("linear", "submitit_slurm", args)
    finished = to_container(compose(runs[0].overrides))
    finished["trainer"].update(accelerator="gpu", precision="bf16-mixed")
    runs[0].run_dir.mkdir(parents=True)
    (runs[0].run_dir / "run_config.json").write_text(json.dumps(finished))
    (runs[0].run_dir / RESULT_FILE).write_text(json.dumps({"status": "finished"}))
    assert sweep.plan("linear", "submitit_slurm", args)[0][0].action == "skip"
    asked = [*args, "trainer.precision=16-mixed"]  # a precision given on the command line: known here, compared
    runs, _ = sweep.plan("linear", "submitit_slurm", asked)
    runs[0].run_dir.mkdir(parents=True)
    (runs[0].run_dir / "run_config.json").write_text(json.dumps(finished))  # stored bf16-mixed
    assert sweep.plan("linear", "submitit_slurm", asked)[0][0].action == "conflict"


def _fake_outcomes(runs, loss_of) -> None:
    """A finished record in each planned run's directory, its loss `loss_of(lr)` (planning reads nothing else)."""
    for r in runs:
        lr = float(next(o for o in r.overrides if o.startswith("optim.lr=")).split("=", 1)[1])
        seed = int(next(o for o in r.overrides if o.startswith("seed=")).split("=", 1)[1])
        r.run_dir.mkdir(parents=True, exist_ok=True)
        record = make_record("gelu", seed, loss_of(lr), lr=lr, config={"tuning": "tuning=True" in r.overrides})
        (r.run_dir / RESULT_FILE).write_text(json.dumps(record))


def test_a_sweep_interrupted_during_a_grid_extension_plans_the_same_extension_again(tmp_path):
    """The extension is a function of the finished runs: planned again with one of its runs finished and the other
    not, it asks for the same two runs (one skipped, one started), never a third lr; once both are done and the cap
    is reached, the judged run starts at the new lr."""
    grids = ("hydra.sweeper.grids=[{ffn: gelu, optim.lr: '0.000125,0.000177,0.00025,0.000354,0.0005', "
             "seed: '100,101', tuning: true}, {ffn: gelu, optim.lr: tuned, seed: 0}]")
    args = [*micro_args(tmp_path), "hydra.sweeper.params=null", "lr_protocol.robust=true", "lr_protocol.min_lrs=5",
            "lr_protocol.min_seeds=2", "lr_protocol.bracket_cap=1", grids]
    runs, _ = sweep.plan("linear", None, args)
    assert [r.action for r in runs].count("start") == 10 and [r.action for r in runs].count("wait") == 1
    _fake_outcomes([r for r in runs if r.action == "start"], lambda lr: 3.0 - lr)  # the larger the better
    runs, _ = sweep.plan("linear", None, args)
    extension = [r for r in runs if r.action == "start"]
    assert len(extension) == 2 and all("optim.lr=0.000707" in r.overrides for r in extension)
    _fake_outcomes(extension[:1], lambda lr: 3.0 - lr)  # interrupted: one of the two finished
    again, _ = sweep.plan("linear", None, args)
    assert {r.run_dir: r.action for r in again if r.run_dir in {e.run_dir for e in extension}} == {
        extension[0].run_dir: "skip", extension[1].run_dir: "start"}
    assert len(again) == 13 and [r.action for r in again].count("wait") == 1
    _fake_outcomes(extension[1:], lambda lr: 3.0 - lr)
    final, _ = sweep.plan("linear", None, args)
    judged = [r for r in final if r.action == "start"]
    assert len(judged) == 1 and judged[0].tuned and "optim.lr=0.000707" in judged[0].overrides


def test_grid_selections_are_checked_and_restore_replaces_only_an_unfinished_record(tmp_path):
    assert sweep.parse_grids("0-2,5") == [0, 1, 2, 5] and sweep.parse_grids(None) is None
    for bad in ("2-0", "x", "0-2,"):
        with pytest.raises(ConfigError, match=f"--grids {bad}: expected grid indices like 0-2,5"):
            sweep.parse_grids(bad)
    published = [make_record("gelu", s, 3.0 + s / 100) for s in (0, 1)]
    for i, r in enumerate(published):
        r["run_name"] = f"gelu-s{i}"
    results_file = tmp_path / "results.jsonl"
    results_file.write_text("".join(json.dumps(r) + "\n" for r in published))
    sweep_dir = tmp_path / "runs" / "x"
    (sweep_dir / "gelu-s1").mkdir(parents=True)
    (sweep_dir / "gelu-s1" / RESULT_FILE).write_text(json.dumps({**published[1], "status": "failed"}))
    assert sweep.restore(results_file, sweep_dir) == 2  # the failed local record is replaced by the finished one
    assert json.loads((sweep_dir / "gelu-s1" / RESULT_FILE).read_text())["status"] == "finished"
    assert sweep.restore(results_file, sweep_dir) == 0  # finished here: left alone
    with pytest.raises(ConfigError, match="--restore .*: no such file"):
        sweep.restore(tmp_path / "missing.jsonl", sweep_dir)
