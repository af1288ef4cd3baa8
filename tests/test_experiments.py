"""Every claim experiment (conf/experiment/<name>.yaml) trains: its first job, shrunk to a 2-step micro run, through
the real entry point (`python -m ffnbench.train experiment=<name> ...`) in a subprocess, ends `finished` with a
finite validation loss and with the experiment's own settings in its config.

A run is a few seconds, most of them imports; two run at a time (the CI machine has 2 cores) and all of them share
one token cache, so the corpus is tokenized once. The full micro sweeps are in test_sweep_cli.py (slow)."""

import json
import math
import os
import re
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

EXPERIMENT_DIR = Path(__file__).resolve().parents[1] / "conf" / "experiment"
EXPERIMENTS = sorted(p.stem for p in EXPERIMENT_DIR.glob("*.yaml") if not p.stem.startswith("_"))

# What makes any job a 2-step CPU run of the micro model on Shakespeare bytes. A job's own value for one of these
# keys gives way (scale's `model=tiny`, _gpu's data and batch); keys inside them (model.n_layer) stay.
MICRO = {
    "model": "micro", "data": "shakespeare", "data.tokenizer": "byte", "data.batch_size": "4",
    "data.val_tokens": "256",
    "data.final_val_tokens": "256", "trainer.max_steps": "2", "trainer.val_every": "2", "trainer.ckpt_every": "2",
    "trainer.accelerator": "cpu", "trainer.peak_flops": "1e12",  # a configured peak: no CPU probe per run
    "trainer.progress_bar": "false", "logger": "csv",
}
# A fixed non-embedding budget sized for the micro model (2 layers of d=32 hold about 25k parameters).
MICRO_NON_EMBEDDING_PARAMS = "30000"
STEPS = int(MICRO["trainer.max_steps"])


def first_job(experiment: str) -> list[str]:
    """The overrides of the first job the experiment's sweep launches: the first value of each key of its first
    grid (`hydra.sweeper.grids[0]`, or `hydra.sweeper.params`), in the grid's order."""
    from ffnbench.config.compose import compose
    from ffnbench.sweep.planning import preset_grids

    cfg = compose([f"experiment={experiment}"], return_hydra_config=True)
    grids = [g for g, _ in preset_grids(cfg)]  # spelled out, or its comparisons crossed with the arms
    grid = grids[0] if grids else OmegaConf.to_container(cfg.hydra.sweeper.params)
    job = []
    for key, value in grid.items():
        text = str(value).lower() if isinstance(value, bool) else str(value)
        assert "(" not in text, f"{experiment}: {key}={text}: a sweep function; take its first value here"
        job.append(f"{key}={text.split(',')[0].strip()}")
    return job


def micro(job: list[str]) -> list[str]:
    """The job's overrides that survive MICRO, with a fixed parameter budget scaled down to the micro model."""
    kept = []
    for override in job:
        key, value = override.split("=", 1)
        if key == "model.non_embedding_params":
            value = MICRO_NON_EMBEDDING_PARAMS
        if key not in MICRO:
            kept.append(f"{key}={value}")
    return kept


def train(experiment: str, job: list[str], root: Path, cache: Path) -> tuple[subprocess.CompletedProcess, Path]:
    run_dir = root / experiment
    command = [sys.executable, "-m", "ffnbench.train", f"experiment={experiment}", *micro(job),
               *(f"{k}={v}" for k, v in MICRO.items()), f"data.cache_dir={cache}", f"run_dir={run_dir}",
               f"runs_root={root / 'runs'}"]
    env = {**os.environ, "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1", "HYDRA_FULL_ERROR": "1"}
    out = subprocess.run(command, capture_output=True, text=True, env=env, cwd=root, timeout=600)
    return out, run_dir


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory) -> dict[str, Future]:
    """The runs of the experiments this session selected, started at once, two at a time; a test waits for its
    own. The token cache is shared (its build is locked: the first run writes it, the others read it)."""
    selected = {item.callspec.params["experiment"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")}
    root, cache = tmp_path_factory.mktemp("experiments"), tmp_path_factory.mktemp("token-cache")
    jobs = {name: first_job(name) for name in sorted(selected)}  # composed here: Hydra's composition is one thread's
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield {name: pool.submit(train, name, jobs[name], root, cache) for name in sorted(selected)}


def test_every_experiment_has_a_grid():
    assert EXPERIMENTS, EXPERIMENT_DIR
    for experiment in EXPERIMENTS:
        job = first_job(experiment)
        assert any(o.startswith("ffn=") for o in job) and any(o.startswith("seed=") for o in job), (experiment, job)


def test_micro_overrides_win_and_budgets_shrink():
    job = ["ffn=relu", "model=tiny", "model.n_layer=3", "model.non_embedding_params=10000000", "data.batch_size=64"]
    assert micro(job) == ["ffn=relu", "model.n_layer=3", f"model.non_embedding_params={MICRO_NON_EMBEDDING_PARAMS}"]


def setting(config: dict, override: str):
    """The value `override` set in a composed config, and the value it asks for (typed as Hydra parses it)."""
    parsed = OverridesParser.create().parse_override(override)
    key = "ffn.act" if parsed.key_or_group == "ffn" else parsed.key_or_group  # the group file sets `act`
    value = config
    for part in key.split("."):
        value = value[part]
    return value, parsed.value()


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_the_experiment_trains(experiment, runs):
    out, run_dir = runs[experiment].result()
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["status"] == "finished" and result["steps"] == STEPS
    loss = result["metrics"]["final_val_loss"]
    assert isinstance(loss, float) and math.isfinite(loss)
    config = result["config"]
    # cpu_robust_more's runs join the campaign's (its arms beyond the budget): its preset keeps cpu_robust's name
    assert config["name"] == {"cpu_robust_more": "cpu_robust"}.get(experiment, experiment)
    assert config["model"]["name"] == "micro"
    for override in micro(first_job(experiment)):
        actual, wanted = setting(config, override)
        assert actual == wanted, (override, actual)


GROUPS = ("model", "ffn", "data", "optim", "trainer", "logger")  # the config groups a grid value selects an option of


def grid_group_values(experiment: str) -> set[tuple[str, str]]:
    """Every (config group, option) any job of the preset selects through its grids (a sweep list split)."""
    from ffnbench.config.compose import compose
    from ffnbench.sweep.planning import preset_grids

    cfg = compose([f"experiment={experiment}"], return_hydra_config=True)
    sweeper = cfg.hydra.sweeper
    grids = [g for g, _ in preset_grids(cfg)]
    if sweeper.get("params"):
        grids = [*grids, OmegaConf.to_container(sweeper.params)]
    return {(key, value.strip()) for grid in grids for key, values in grid.items() if key in GROUPS
            for value in str(values).split(",")}


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_option_a_presets_jobs_select_exists(experiment):
    """Every job of every preset composes: a typo in a grid (`ffn: "relu,relu7,gelu"`) names an option that does not
    exist, which the first job's run never meets."""
    missing = [f"{group}={option}" for group, option in sorted(grid_group_values(experiment))
               if not (EXPERIMENT_DIR.parent / group / f"{option}.yaml").is_file()]
    assert not missing, f"{experiment}: its grids select options conf/ has no file for: {', '.join(missing)}"


def test_a_typo_in_a_grid_is_caught(monkeypatch):
    from ffnbench.config import compose as compose_module

    real = compose_module.compose

    def typo(overrides, **kwargs):
        cfg = real(overrides, **kwargs)
        if kwargs.get("return_hydra_config"):
            cfg.hydra.sweeper.grids = [{"ffn": "relu,relu7,gelu", "seed": "0"}]
        return cfg

    monkeypatch.setattr(compose_module, "compose", typo)
    assert ("ffn", "relu7") in grid_group_values("quick")
    with pytest.raises(AssertionError, match="ffn=relu7"):
        test_every_option_a_presets_jobs_select_exists("quick")


# The presets the README tells a CPU user to run: quick (the default) and micro (its quick form, ~2 minutes).
CPU_PRESETS = ("quick", "micro")
README = EXPERIMENT_DIR.parents[1] / "README.md"


def run_shape(overrides: list[str]) -> dict:
    """What one job of `overrides` computes: its model, optimizer steps, warmup, training and final-validation tokens,
    and the step at which its plateau is judged (instability.plateau_after × warmup_steps)."""
    from ffnbench.config.compose import compose
    from ffnbench.config.schema import run_spec
    from ffnbench.data.tokenizer import vocab_size_for

    cfg = compose(overrides)
    spec = run_spec(cfg, vocab_size_for(cfg.data))
    per_step = int(cfg.data.batch_size) * spec.model.seq_len
    steps = spec.total_steps(per_step)
    return {"model": cfg.model.name, "steps": steps, "warmup": spec.optim.warmup_steps,
            "tokens": steps * per_step, "final_val_tokens": int(cfg.data.final_val_tokens or cfg.data.val_tokens),
            "plateau_judged_at": float(cfg.instability.plateau_after) * spec.optim.warmup_steps}


def shape_problems(shape: dict) -> list[str]:
    """A CPU preset's run is a run worth reading: its warmup at most a quarter of it, its plateau judged before it ends
    (the instability rules can say whether it learned), and its final validation (a forward pass: about a third of a
    training token's compute) at most a quarter of its training compute."""
    problems = []
    if shape["warmup"] > shape["steps"] / 4:
        problems.append(f"warmup {shape['warmup']} steps of a {shape['steps']}-step run")
    if shape["plateau_judged_at"] > shape["steps"]:
        problems.append(f"its plateau is judged at step {shape['plateau_judged_at']:g}, after its {shape['steps']} "
                        "steps")
    if shape["final_val_tokens"] / 3 > shape["tokens"] / 4:
        problems.append(f"a final validation of {shape['final_val_tokens']:,} tokens after {shape['tokens']:,} trained")
    return problems


@pytest.mark.parametrize("experiment", CPU_PRESETS)
def test_a_cpu_presets_warmup_fits_its_run_and_its_final_validation_is_sized_to_it(experiment):
    shape = run_shape([f"experiment={experiment}"])
    assert not shape_problems(shape), f"{experiment}: " + "; ".join(shape_problems(shape))


def test_the_shape_check_refuses_the_old_micro_form():
    """The old documented quick form, `make sweep ARGS="trainer.max_steps=10 data.final_val_tokens=2048"`: quick's
    40-step warmup squeezed into 10 steps; and a 60-step micro run with the default 262,144-token final validation."""
    squeezed = shape_problems(run_shape(["experiment=quick", "trainer.max_steps=10", "data.final_val_tokens=2048"]))
    assert squeezed == ["warmup 40 steps of a 10-step run", "its plateau is judged at step 100, after its 10 steps"]
    long_final = shape_problems(run_shape(["model=micro", "trainer.max_steps=60", "optim.warmup_steps=10"]))
    assert long_final == ["a final validation of 262,144 tokens after 61,440 trained"]


def test_the_readmes_micro_form_is_the_micro_preset_at_the_micro_model():
    """README.md's quick form of `make sweep` runs what it says: the micro model (issue 44: it ran tiny)."""
    from ffnbench.config.compose import compose
    from ffnbench.sweep.planning import preset_grids

    text = README.read_text()
    assert re.search(r"^make sweep EXP=micro +# .*micro", text, flags=re.M), "README.md: no `make sweep EXP=micro` line"
    cfg = compose(["experiment=micro"], return_hydra_config=True)
    assert cfg.model.name == "micro" and cfg.name == "micro"
    assert not any("model" in grid for grid, _ in preset_grids(cfg)), "a grid of micro selects another model"
    assert run_shape(["experiment=micro"])["model"] == "micro"


@pytest.mark.slow
def test_the_micro_sweep_writes_a_report_with_every_section(tmp_path):
    """`make sweep EXP=micro` end to end in a scratch folder: 14 finished runs of the micro model, and a report whose
    every section has numbers: an interval in each section of a claim quick tests, the results table, the figures."""
    env = {**os.environ, "WANDB_MODE": "offline", "HYDRA_FULL_ERROR": "1"}
    out = subprocess.run([sys.executable, "-m", "ffnbench.sweep", "micro"], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=1200)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    results = [json.loads(line) for line in (tmp_path / "runs" / "micro" / "results.jsonl").read_text().splitlines()]
    assert len(results) == 14 and {r["status"] for r in results} == {"finished"}
    assert {r["model"]["d_model"] for r in results} == {32} and {r["steps"] for r in results} == {150}
    report = (tmp_path / "runs" / "micro" / "REPORT.md").read_text()
    for cid in ("C1", "C3", "C4", "C5", "C7", "C13"):
        section = report.split(f"### {cid}: ", 1)[1].split("\n### ", 1)[0]
        assert "95% CI [" in section, f"{cid}: no interval in its section"
    for heading in ("## Method", "## Claims", "## Instabilities", "## Results by comparison", "## Figures",
                    "## Provenance"):
        assert heading in report, heading
    figures = {p.name for p in (tmp_path / "runs" / "micro" / "figures").glob("*.png")}
    assert {"curves.png", "matched_budget.png", "loss_vs_ratio.png", "sparsity.png"} <= figures
