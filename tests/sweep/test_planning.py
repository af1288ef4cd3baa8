"""Sweep planning: every experiment expands to the runs it means, each run's directory and what rerunning it
does (finished records of other machines included), tuned lrs and grid extensions, and the checks that refuse a
plan before any work."""

import json
from pathlib import Path

import pytest
import torch
from fixtures.report.synthetic import make_record
from fixtures.sweep.runs import BIG, EXPECTED_RUNS, NO_ARMS, PLAIN_LINEAR, micro_args, preset_jobs

from ffnbench.config.compose import compose
from ffnbench.config.identity import identity_key
from ffnbench.config.schema import run_spec, to_container
from ffnbench.data.tokenizer import vocab_size_for
from ffnbench.errors import ConfigError
from ffnbench.runs.result import RESULT_FILE
from ffnbench.sweep import planning
from ffnbench.sweep.keys import config_key
from ffnbench.sweep.progress import planned_flops

REPO = Path(__file__).resolve().parents[2]


def test_every_experiment_is_listed_and_expands_to_its_grid():
    assert set(planning.experiments()) == set(EXPECTED_RUNS)
    for name, expected in EXPECTED_RUNS.items():
        if name in BIG:
            assert len(preset_jobs(name)) == expected, name
            continue
        runs, cfg = planning.plan(name, None, [])
        assert len(runs) == expected, name
        assert len({r.run_dir for r in runs}) == expected, f"{name}: two runs share a directory"
        assert all(r.run_dir.parent == Path("runs") / name for r in runs)
        assert cfg.name == name


def test_the_quick_grid_covers_every_factor_of_the_mission():
    runs, _ = planning.plan("quick", None, [])
    names = {r.run_dir.name for r in runs}
    for act in ("relu", "gelu", "swiglu"):
        assert {f"{act}-b4-nobias-s0", f"{act}-b4-nobias-s1"} <= names  # matched budget, ≥ 2 seeds
    assert {"gelu-w2-nobias-s0", "gelu-w8-nobias-s0", "gelu-b4-bias-s0"} <= names  # widths 2/4/8, bias on/off


def test_command_line_overrides_win_over_the_grid():
    two_grids = ("hydra.sweeper.grids=[{ffn: 'relu,gelu,swiglu', seed: '0,1'}, "
                 "{ffn: 'relu,gelu', model.ffn_init: matched}]")
    runs, _ = planning.plan("linear", None, [*PLAIN_LINEAR, "hydra.sweeper.params=null", two_grids, "seed=0",
                                             "ffn=relu,gelu"])
    assert sorted(r.run_dir.name for r in runs) == [  # both grids, each at the command line's ffn and seed
        "gelu-b4-nobias-model.ffn_init=matched-s0", "gelu-b4-nobias-s0",
        "relu-b4-nobias-model.ffn_init=matched-s0", "relu-b4-nobias-s0"]


def test_each_planned_run_counts_the_flops_of_its_spec(tmp_path):
    runs, _ = planning.plan("quick", None, ["seed=0", "ffn=gelu", f"runs_root={tmp_path}"])
    for run in runs:
        config = to_container(compose(run.overrides))
        spec = run_spec(config, vocab_size_for(config["data"]))
        assert run.flops == planned_flops(spec, config["data"]["batch_size"]) > 0, run.run_dir


@pytest.mark.parametrize("bad, name, error", [
    ("data.batch_size=0", "relu-b4-nobias-", "data.batch_size: must be a positive integer, got 0"),
    ("ffn.act=nope", "nope-invalid-s0", "ffn.act: unknown FFN variant 'nope'; known variants: relu"),
    ("data.val_tokens=8", "relu-b4-nobias-", "data.val_tokens=8: less than one validation window"),
    ("optim.lr=-1", "relu-b4-nobias-", "optim.lr: must be > 0"),
])
def test_a_job_its_run_would_refuse_stops_the_plan_naming_the_job(tmp_path, bad, name, error):
    """Issue 44: every job's settings are checked as its run checks them, before any work: the first refused job is
    named, with how many share its problem (quick: 17 jobs, one grid of them each)."""
    with pytest.raises(ConfigError) as info:
        planning.plan("quick", None, [bad, f"runs_root={tmp_path}"])
    message = str(info.value)
    assert message.startswith(f"job {name}") and "would be refused when it starts (and 16 more jobs" in message
    assert error in message and "\n" not in message
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_a_judged_job_is_checked_before_its_lr_is_chosen(tmp_path):
    """A judged job's lr is its tuning runs' to choose; its other settings are checked now (at jobs.CHECK_LR)."""
    grid = ("{ffn: gelu, optim.lr: '0.000125,0.000177,0.00025,0.000354,0.0005', seed: '100,101', tuning: true}")
    args = [*micro_args(tmp_path), "hydra.sweeper.params=null", "lr_protocol.robust=true", "lr_protocol.min_lrs=5",
            "lr_protocol.min_seeds=2", f"hydra.sweeper.grids=[{grid}, {{ffn: gelu, optim.lr: tuned, seed: 0, "
            "optim.warmup_steps: -1}]"]
    with pytest.raises(ConfigError, match=r"^job gelu-b4-nobias-\S+-s0 would be refused when it starts: "
                                          r"optim.warmup_steps: must be an integer ≥ 0, got -1$"):
        planning.plan("quick", None, args)


def test_a_big_cpu_grid_needs_confirmation(tmp_path, monkeypatch):
    monkeypatch.setattr(planning, "MAX_CPU_RUNS", 8)  # the real threshold, 30, works the same on a bigger grid
    runs, cfg = planning.plan("linear", None, ["trainer.accelerator=cpu", f"runs_root={tmp_path}", *PLAIN_LINEAR])
    with pytest.raises(ConfigError, match=r"would train 9 runs on the CPU \(more than 8\).*CONFIRM=1"):
        planning.check_plan(runs, cfg, None, confirmed=False)
    planning.check_plan(runs, cfg, None, confirmed=True)


def test_slurm_needs_its_settings(tmp_path):
    runs, cfg = planning.plan("linear", "submitit_slurm", [f"runs_root={tmp_path}", *PLAIN_LINEAR])
    with pytest.raises(ConfigError, match=r"needs SLURM settings: set slurm\.partition"):
        planning.check_plan(runs, cfg, "submitit_slurm", confirmed=False)
    runs, cfg = planning.plan("linear", "submitit_slurm",
                              [f"runs_root={tmp_path}", "slurm.partition=gpu", *PLAIN_LINEAR])
    planning.check_plan(runs, cfg, "submitit_slurm", confirmed=False)
    assert cfg.hydra.launcher.partition == "gpu" and cfg.hydra.launcher.gpus_per_node == cfg.trainer.devices


# ---- GPU nodes and clusters, planned on the CPU -----------------------------------------------------------------


@pytest.fixture
def cpu_only(monkeypatch):
    """A machine without a GPU (a login node, this one)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


def test_a_slurm_sweep_planned_on_a_cpu_login_node_is_not_refused(tmp_path, monkeypatch, cpu_only):
    """The runs train on the cluster's GPU nodes; only runs that really train on a CPU count towards CONFIRM=1."""
    monkeypatch.setattr(planning, "MAX_CPU_RUNS", 8)
    args = [f"runs_root={tmp_path}", "slurm.partition=gpu"]
    for experiment in ("quick", "activations"):  # trainer=auto, and a GPU experiment (trainer.accelerator=gpu)
        runs, cfg = planning.plan(experiment, "submitit_slurm", args)
        planning.check_plan(runs, cfg, "submitit_slurm", confirmed=False)
    runs, cfg = planning.plan("quick", "submitit_slurm", [*args, "trainer.accelerator=cpu"])
    with pytest.raises(ConfigError, match=r"would train 17 runs on the CPU"):  # CPU jobs on the cluster: they count
        planning.check_plan(runs, cfg, "submitit_slurm", confirmed=False)
    runs, cfg = planning.plan("quick", None, [f"runs_root={tmp_path}"])  # trained here, on this CPU: they count
    with pytest.raises(ConfigError, match=r"would train 17 runs on the CPU"):
        planning.check_plan(runs, cfg, None, confirmed=False)


def test_a_gpu_sweep_started_on_a_machine_without_a_gpu_is_refused_before_it_starts(tmp_path, cpu_only):
    runs, cfg = planning.plan("bias", "joblib", [f"runs_root={tmp_path}"])
    with pytest.raises(ConfigError, match=r"^trainer\.accelerator=gpu: no CUDA GPU is visible here \(.+\)"):
        planning.check_plan(runs, cfg, "joblib", confirmed=False)
    runs, cfg = planning.plan("bias", None, [f"runs_root={tmp_path}", "trainer.accelerator=cpu"])
    planning.check_plan(runs, cfg, None, confirmed=True)  # on the CPU on purpose


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
    runs, _ = planning.plan("quick", None, [f"runs_root={tmp_path}"])
    assert len(runs) == len(records) and {r.action for r in runs} == {"skip"}


def test_a_slurm_rerun_from_a_login_node_skips_what_gpu_nodes_finished(tmp_path, cpu_only):
    """The login node cannot resolve the nodes' precision: the planner leaves it to the run, and still sees the
    finished runs (stored as gpu / bf16-mixed) as the same runs."""
    args = [f"runs_root={tmp_path}", "slurm.partition=gpu", *PLAIN_LINEAR, "seed=0", "ffn=gelu"]
    runs, _ = planning.plan("linear", "submitit_slurm", args)
    finished = to_container(compose(runs[0].overrides))
    finished["trainer"].update(accelerator="gpu", precision="bf16-mixed")
    runs[0].run_dir.mkdir(parents=True)
    (runs[0].run_dir / "run_config.json").write_text(json.dumps(finished))
    (runs[0].run_dir / RESULT_FILE).write_text(json.dumps({"status": "finished"}))
    assert planning.plan("linear", "submitit_slurm", args)[0][0].action == "skip"
    asked = [*args, "trainer.precision=16-mixed"]  # a precision given on the command line: known here, compared
    runs, _ = planning.plan("linear", "submitit_slurm", asked)
    runs[0].run_dir.mkdir(parents=True)
    (runs[0].run_dir / "run_config.json").write_text(json.dumps(finished))  # stored bf16-mixed
    assert planning.plan("linear", "submitit_slurm", asked)[0][0].action == "conflict"


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
    args = [*micro_args(tmp_path), *PLAIN_LINEAR, "hydra.sweeper.params=null", "lr_protocol.robust=true",
            "lr_protocol.min_lrs=5",
            "lr_protocol.min_seeds=2", "lr_protocol.bracket_cap=1", grids]
    runs, _ = planning.plan("linear", None, args)
    assert [r.action for r in runs].count("start") == 10 and [r.action for r in runs].count("wait") == 1
    _fake_outcomes([r for r in runs if r.action == "start"], lambda lr: 3.0 - lr)  # the larger the better
    runs, _ = planning.plan("linear", None, args)
    extension = [r for r in runs if r.action == "start"]
    assert len(extension) == 2 and all("optim.lr=0.000707" in r.overrides for r in extension)
    _fake_outcomes(extension[:1], lambda lr: 3.0 - lr)  # interrupted: one of the two finished
    again, _ = planning.plan("linear", None, args)
    assert {r.run_dir: r.action for r in again if r.run_dir in {e.run_dir for e in extension}} == {
        extension[0].run_dir: "skip", extension[1].run_dir: "start"}
    assert len(again) == 13 and [r.action for r in again].count("wait") == 1
    _fake_outcomes(extension[1:], lambda lr: 3.0 - lr)
    final, _ = planning.plan("linear", None, args)
    judged = [r for r in final if r.action == "start"]
    assert len(judged) == 1 and judged[0].tuned and "optim.lr=0.000707" in judged[0].overrides


def test_judging_at_the_neighbours_adds_the_lrs_half_an_octave_either_side_and_keeps_the_chosen_run(tmp_path):
    """lr_protocol.judge_neighbours: each judged seed runs at the chosen lr (the same run directory as without the
    flag) and at its lattice neighbours ×√2 and ÷√2; an upper neighbour outside the tuning grid is still judged."""
    grid = ("{ffn: gelu, optim.lr: '0.000125,0.000177,0.00025,0.000354,0.0005', seed: '100,101', tuning: true}")
    plain = [*micro_args(tmp_path), "hydra.sweeper.params=null", "lr_protocol.robust=true", "lr_protocol.min_lrs=5",
             "lr_protocol.min_seeds=2", f"hydra.sweeper.grids=[{grid}, {{ffn: gelu, optim.lr: tuned, seed: '0,1'}}]"]
    flagged = [*plain[:-1], f"hydra.sweeper.grids=[{grid}, {{ffn: gelu, optim.lr: tuned, seed: '0,1', "
                            "lr_protocol.judge_neighbours: true}]"]
    runs, _ = planning.plan("quick", None, flagged)
    assert [r.action for r in runs].count("wait") == 2  # no neighbours before the choice
    _fake_outcomes([r for r in runs if r.action == "start"], lambda lr: 3.0 - lr)  # the largest lr wins: 0.0005
    judged = [r for r in planning.plan("quick", None, flagged)[0] if r.tuned]
    lrs = sorted({next(o for o in r.overrides if o.startswith("optim.lr=")) for r in judged})
    assert lrs == ["optim.lr=0.000354", "optim.lr=0.0005", "optim.lr=0.000707"] and len(judged) == 6
    without = [r for r in planning.plan("quick", None, plain)[0] if r.tuned]
    assert {r.run_dir for r in without} == {r.run_dir for r in judged if "optim.lr=0.0005" in r.overrides}
    assert all("judge_neighbours" not in r.run_dir.name for r in judged)  # the flag is not part of a run's name


@pytest.mark.parametrize("lr, expected", [(0.004, (0.00283, 0.00566)), (0.0113, (0.008, 0.016)),
                                          (0.003, (0.00212, 0.00424))])
def test_the_neighbours_of_an_lr_are_half_an_octave_either_side(lr, expected):
    from ffnbench.claims.lr_protocol import neighbour_lrs

    assert neighbour_lrs(lr) == expected


def test_the_published_campaign_plans_every_record_as_skipped(tmp_path, cpu_only):
    """Every record of experiments/cpu-robust/results.jsonl is a run the preset (its new arms included) still plans,
    and plans as done: a changed name or identity would plan it as a conflict, or not at all."""
    from ffnbench.sweep.restore import restore

    records = [json.loads(line) for line in (REPO / "experiments" / "cpu-robust" / "results.jsonl").open()]
    restore(REPO / "experiments" / "cpu-robust" / "results.jsonl", tmp_path / "cpu_robust")
    runs, _ = planning.plan("cpu_robust", None, [f"runs_root={tmp_path}"])
    actions = {r.run_dir.name: r.action for r in runs}
    assert {rec["run_name"]: actions.get(rec["run_name"]) for rec in records} == {
        rec["run_name"]: "skip" for rec in records}


# ---- one run per resolved config (issue 42, defect 4) -----------------------------------------------------------


def _two_names_one_config(tmp_path) -> list[str]:
    """`full`'s C8 in small: model.n_layer=2 beside model=micro (whose n_layer is 2) names one config twice."""
    grids = "hydra.sweeper.grids=[{ffn: relu, seed: '0,1'}, {ffn: relu, model.n_layer: '1,2', seed: '0,1'}]"
    return [*micro_args(tmp_path), *NO_ARMS, "hydra.sweeper.params=null", grids]


def _names(tmp_path) -> tuple[str, str]:
    """The names of seed 0's run in the first grid, and of its second name in the second grid (planned alone)."""
    first = planning.plan("linear", None, _two_names_one_config(tmp_path), only_grids=[0])[0][0]
    alone = planning.plan("linear", None, _two_names_one_config(tmp_path), only_grids=[1])[0]
    second = next(r for r in alone if "model.n_layer=2" in r.overrides and "seed=0" in r.overrides)
    return first.run_dir.name, second.run_dir.name


def test_two_jobs_of_one_resolved_config_are_planned_once_under_the_first_name(tmp_path):
    runs, _ = planning.plan("linear", None, _two_names_one_config(tmp_path))
    first, second = _names(tmp_path)
    assert first != second and len(runs) == 4  # 6 jobs, 2 of them named twice
    assert {r.run_dir.name: r.duplicates for r in runs}[first] == (second,)
    assert second not in {r.run_dir.name for r in runs}
    identities = [identity_key(r.config) for r in runs]
    assert len(set(identities)) == len(runs)  # no run planned twice
    assert [config_key(r.config) for r in runs] == identities  # the planner's fast key is identity_key


def test_of_two_names_of_one_config_the_one_whose_folder_holds_a_record_is_kept(tmp_path):
    """A published run keeps its name: had the second name been trained (a record in its folder), it stays planned,
    as done, and the first is the one dropped."""
    args = _two_names_one_config(tmp_path)
    runs, _ = planning.plan("linear", None, args)
    first, second = _names(tmp_path)
    kept = next(r for r in runs if r.run_dir.name == first)
    other = kept.run_dir.parent / second
    other.mkdir(parents=True)
    (other / "run_config.json").write_text(json.dumps(kept.config))
    (other / RESULT_FILE).write_text(json.dumps({**make_record("relu", 0), "config": kept.config}))
    again = {r.run_dir.name: r for r in planning.plan("linear", None, args)[0]}
    assert first not in again and again[second].action == "skip"
    assert again[second].duplicates == (first,) and len(again) == 4


@pytest.mark.slow  # `full` plans ~4,300 runs: seconds, but tens of them on a loaded 2-core machine
def test_full_plans_no_run_twice_and_its_header_counts_what_its_cost_block_does(tmp_path, capsys, monkeypatch):
    from ffnbench.sweep import cli

    runs, _ = planning.plan("full", None, [f"runs_root={tmp_path}"])
    assert len({identity_key(r.config) for r in runs}) == len(runs)
    assert sum(len(r.duplicates) * (1 + r.neighbours) for r in runs) == 78  # C8's n_layer 12 under model=base
    monkeypatch.chdir(tmp_path)
    cli.main(["full", "--dry-run", "--gpu", "H100"])
    out = capsys.readouterr().out.splitlines()
    header = next(line for line in out if line.startswith("full: "))
    total = next(line for line in out if line.startswith("  total: "))
    assert int(header.split()[1]) == int(total.split()[1]) == planning.run_count(runs)
