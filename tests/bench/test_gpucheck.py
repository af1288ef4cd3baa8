"""ffnbench.bench.gpucheck (`make gpu-check`): its control flow on the CPU, and what can be checked of the GPU's
without one."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ffnbench.bench import gpucheck
from ffnbench.bench import gpucheck_plan as plans
from ffnbench.bench.gpucheck_price import validation_counts
from ffnbench.bench.gpucheck_train import train_overrides
from ffnbench.bench.session import BenchSession

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ["software", "process start", "train small", "train base", "train small-swiglu",
          "pipeline ÷ hand loop at small", "alignment (C9)", "DDP, 2 processes"]
PRICE_CONTRACT = {"gpu", "mfu", "overhead_s_per_run", "attention_flops"}  # what ffnbench.sweep.cost reads


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a machine without a GPU")
def test_gpu_check_on_a_cpu_exits_2_with_one_line(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        gpucheck.main(["--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert err.startswith("ffnbench: error: make gpu-check needs a CUDA GPU; none is visible here (")
    assert "--cpu-smoke" in err  # what runs here instead
    assert not any(tmp_path.iterdir())
    makefile = (ROOT / "Makefile").read_text()
    assert "\ngpu-check: " in makefile and "-m ffnbench.bench.gpucheck" in makefile


@pytest.mark.parametrize("argv, message", [
    (["--cpu-smoke"], "--cpu-smoke needs --out DIR"),
    (["--cpu-smoke", "--out", "{tmp}", "--time-budget", "-1"], "--time-budget: expected seconds ≥ 0, got -1.0"),
])
def test_bad_arguments_exit_2_with_one_line_before_any_work(capsys, tmp_path, argv, message):
    with pytest.raises(SystemExit) as e:
        gpucheck.main([a.format(tmp=tmp_path) for a in argv])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and message in err
    assert not any(tmp_path.iterdir())


def test_the_gpu_check_record_goes_under_the_gpus_name(tmp_path):
    assert gpucheck.gpu_label("NVIDIA H200 NVL") == "nvidia-h200-nvl"
    assert gpucheck.gpu_label("Tesla V100-SXM2-32GB") == "tesla-v100-sxm2-32gb"
    path = gpucheck.write_record(tmp_path / "nvidia-h200", {"ok": True, "mfu": float("nan")})
    assert path == tmp_path / "nvidia-h200" / "gpucheck.json"
    assert json.loads(path.read_text()) == {"ok": True, "mfu": None}
    rows = gpucheck.alignment_summary({"rows": [{"d_ff": 682, "ms_median": 1.5, "ns_per_param": 2.0, "ms": {}}]})
    assert rows == [{"d_ff": 682, "ms": 1.5, "ns_per_param": 2.0}]


def test_the_gpu_checks_sizes_cut_make_benchs_gpu_sizes():
    from ffnbench.bench import cli

    full, cut = cli.sizes_for(False, True), plans.check_sizes()
    assert set(cut) == set(full) and cut["variants"] == full["variants"]
    assert cut["alignment"].reps < full["alignment"].reps
    for plan in (plans.gpu_plan(), plans.gpu_plan(quick=True), plans.smoke_plan()):
        warmup, window, windows = plan.compare_steps  # as overhead_compare.compare unpacks them
        assert warmup >= 1 and window >= 1 and windows >= 2
        for shape in plan.shapes:  # a warm validation and checkpoint mid-run, after the warm-up
            assert shape.warmup < shape.every < shape.steps and shape.every % 10 == 0 and shape.steps % 10 == 0


def gpu_session(tmp_path) -> BenchSession:
    """A session that composes what a GPU's session would (trainer=gpu); nothing here touches CUDA."""
    from ffnbench.bench import cli

    return BenchSession(device=torch.device("cuda", 0), quick=False, sizes=cli.sizes_for(False, True),
                        work=tmp_path, cache_dir=tmp_path / "cache")


def test_gpu_check_trains_the_gpu_sweeps_own_static_shapes(tmp_path):
    """Defect 6 of issue 42: the MFU and the compile checks must be of the graph a sweep run compiles. The priced
    shapes are the activations experiment's runs (small, and the size arm's base): the same model, FFN, vocabulary,
    batch and steps per Lightning batch; and every validation set, the check's and the sweep's, is whole training
    batches, so no block meets a second batch size (dynamo would recompile it with a symbolic batch, and the run
    would train on that graph: the check's 4,096-token set was a quarter of one batch)."""
    from ffnbench.config.compose import compose
    from ffnbench.config.schema import model_config, trainer_config
    from ffnbench.data.tokenizer import vocab_size_for
    from ffnbench.model.ffn import size_ffn

    def shape_of(cfg) -> tuple:
        m = model_config(cfg, vocab_size_for(cfg.data))
        per_batch = int(cfg.data.batch_size) * m.seq_len
        for key in ("val_tokens", "final_val_tokens"):  # whole batches
            assert int(cfg.data[key]) % per_batch == 0, (key, int(cfg.data[key]), per_batch)
        return (m.d_model, m.n_layer, m.n_head, m.seq_len, m.vocab_size, m.ffn.act, size_ffn(m.ffn, m.d_model).d_ff,
                int(cfg.data.batch_size), str(cfg.data.tokenizer), bool(cfg.trainer.compile),
                trainer_config(cfg.trainer).steps_per_batch())

    plan = plans.gpu_plan()
    session = gpu_session(tmp_path)
    priced = [s for s in plan.shapes if s.group]
    assert [s.group for s in priced] == ["small", "base"]
    for shape in plan.shapes:
        check = compose(train_overrides(session, shape, tmp_path / shape.label, compile=True))
        sweep = compose([f"experiment={plans.SWEEP_EXPERIMENT}", f"model={shape.model}", *shape.extra[2:]])
        assert shape_of(check) == shape_of(sweep)
        assert check.trainer.accelerator == "gpu" and int(check.data.batch_size) == 64
    for group, overrides in plan.price_runs.items():  # the runs priced are those shapes' sweep runs
        shape = next(s for s in priced if s.group == group)
        assert overrides == [f"model={shape.model}", *shape.extra[2:]]
    assert plan.compare == priced[0]  # the overhead is timed at the small sweep shape


def test_make_benchs_pipeline_runs_validate_on_whole_training_batches(tmp_path):
    """The same defect in `make bench` on a GPU: its pipeline runs (mfu, overhead) validated on 4,096 tokens, half a
    batch of small at 32."""
    from ffnbench.bench.contenders import pipeline_overrides
    from ffnbench.config.compose import compose

    session = gpu_session(tmp_path)
    for model, batch in (("tiny", None), ("small", 32), ("small", None), ("base", 8)):
        cfg = compose(pipeline_overrides(session, model, batch))
        per_batch = int(cfg.data.batch_size) * int(cfg.model.seq_len)
        assert int(cfg.data.val_tokens) % per_batch == 0 and int(cfg.data.final_val_tokens) % per_batch == 0
        assert int(cfg.data.val_tokens) >= session.val_tokens


def test_the_checklist_enforces_the_budget_keeps_going_after_a_crash_and_writes_after_every_check(tmp_path):
    now = [0.0]
    record: dict = {}
    checks = gpucheck.Checklist(tmp_path, record, budget_s=10, clock=lambda: now[0])
    seen_on_disk = []

    def passes():
        now[0] += 6
        return True, "fine"

    def crashes():
        seen_on_disk.append(json.loads((tmp_path / "gpucheck.json").read_text())["checks"])
        now[0] += 2
        raise RuntimeError("CUDA error: out of memory\nmore")

    checks.run("first", passes)
    checks.run("second", crashes)  # starts at 6 s: runs, and fails
    checks.run("third", passes)  # starts at 8 s: runs, ends at 14 s
    checks.run("fourth", passes)  # would start at 14 s, past the budget
    assert seen_on_disk == [[{"check": "first", "ok": True, "detail": "fine", "seconds": 6.0}]]  # written already
    on_disk = json.loads((tmp_path / "gpucheck.json").read_text())
    assert [(c["check"], c["ok"]) for c in on_disk["checks"]] == [("first", True), ("second", False),
                                                                  ("third", True), ("fourth", False)]
    assert on_disk["checks"][1]["detail"] == "failed: RuntimeError: CUDA error: out of memory more"
    assert on_disk["checks"][3] == {"check": "fourth", "ok": False, "skipped": "time budget",
                                    "detail": "skipped: time budget (14 s spent of 10 s)"}
    assert on_disk["ok"] is False and on_disk["finished"] is False
    checks.write(finished=True)
    assert json.loads((tmp_path / "gpucheck.json").read_text())["finished"] is True


def test_the_control_flow_runs_every_check_on_the_cpu(tmp_path, monkeypatch, capsys):
    """gpu-check's whole control flow at micro scale, eager (the compiled version is the slow smoke test below): every
    check runs and passes, the three training shapes train in three folders (issue 42's crash: the sweep's shape
    reused the first run's folder, and train() refused it), the record on disk is the one returned, with the price
    block the sweep's price reads. The two subprocess checks (process start, DDP) are stood in for here; the smoke
    test runs them."""
    def process_start(overrides):
        return {"command": "python -m ffnbench.train " + " ".join(overrides) + " --cfg job", "seconds": 4.0}

    def ddp_check(session, shape, steps, compile):
        return {"world_size": 2, "tokens_per_s": 1000.0, "problems": []}

    monkeypatch.setattr(gpucheck, "process_start", process_start)
    monkeypatch.setattr(gpucheck, "ddp_check", ddp_check)
    plan = plans.smoke_plan(compile=False, steps=20)
    record = gpucheck.run_checks(plan, torch.device("cpu"), tmp_path / "out", "cpu-smoke", ["--cpu-smoke"],
                                 budget_s=float("inf"), cache_dir=tmp_path / "cache")
    printed = capsys.readouterr().out
    assert [c["check"].removesuffix(" eager") for c in record["checks"]] == CHECKS
    assert all(c["ok"] for c in record["checks"]), record["checks"]
    assert record["ok"] is True and record["finished"] is True and record["mode"] == "cpu-smoke"
    assert json.loads((tmp_path / "out" / "gpucheck.json").read_text()) == json.loads(json.dumps(record))
    assert "ffnbench gpu-check: passed" in printed

    runs = [Path(r["run_dir"]) for r in record["training"]]
    assert len(set(runs)) == 3 and [r["label"] for r in record["training"]] == ["small", "base", "small-swiglu"]
    assert sorted(p.parent.name for p in (tmp_path / "out" / "train").glob("*/result.json")) == [
        "base", "small", "small-swiglu"]
    for row, shape in zip(record["training"], plan.shapes, strict=True):
        assert row["status"] == "finished" and row["tokens_per_s"] > 0 and row["problems"] == []
        clock = row["clock"]
        assert clock["start_to_first_step_s"] > 0 and clock["val_tokens_per_s"] > 0 and clock["checkpoint_s"] > 0
        # the trainer validated and checkpointed as the price counts a sweep run's (validation_counts)
        fit_vals = sum(v["in_fit"] for v in clock["val_passes"])
        assert (fit_vals, len(clock["checkpoints"])) == validation_counts(shape.steps, shape.every, shape.every)
        assert row["sync_debug"].startswith("skipped: ")  # CUDA only, and said so
    assert (tmp_path / "out" / "alignment.json").exists() and len(record["alignment"]) == 4
    assert record["overhead"]["ratio"]["median"] > 0 and record["overhead"]["hand_mfu"] > 0

    price = record["price"]
    assert set(price) >= PRICE_CONTRACT and price["gpu"] is None and price["attention_flops"] == "causal"
    assert set(price["mfu"]) == set(price["overhead_s_per_run"]) == {"small", "base"}
    assert [price["mfu"]["small"], price["mfu"]["base"]] == [r["mfu"] for r in record["training"][:2]]
    assert price["overhead_parts"]["small"]["process_start_s"] == 4.0
    assert any("micro" in s for s in record["substitutions"]) and any("eager" in s for s in record["substitutions"])


def test_the_ddp_check_reads_the_world_size_that_trained_not_the_devices_asked_for():
    finished = {"status": "finished", "hardware": {"devices": 2, "world_size": 2}}
    assert gpucheck.ddp_problems(0, finished, "", asked=2) == []
    one = {"status": "finished", "hardware": {"devices": 2, "world_size": 1}}  # SLURM's environment trained one
    assert "trained on 1 process(es), asked for 2" in gpucheck.ddp_problems(0, one, "", asked=2)[0]
    assert "failed (exit 1)" in gpucheck.ddp_problems(1, {}, "boom", asked=2)[0]


@pytest.mark.slow
def test_the_cpu_smoke_command_runs_every_check_compiled(tmp_path):
    """The documented command (docs/benchmarks.md): gpu-check's control flow on the CPU at micro scale, compiled
    (inductor's CPU backend), every check, its subprocesses included; exit 0, and the record on disk (minutes)."""
    out = subprocess.run([sys.executable, "-m", "ffnbench.bench.gpucheck", "--cpu-smoke", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=1200, cwd=ROOT)
    record = json.loads((tmp_path / "gpucheck.json").read_text())
    assert [c["check"].removesuffix(" compiled") for c in record["checks"]] == CHECKS
    assert out.returncode == 0, [c for c in record["checks"] if not c["ok"]]
    assert record["ok"] and record["finished"] and record["mode"] == "cpu-smoke"
    assert len({r["run_dir"] for r in record["training"]}) == 3
    assert all(r["compilations"]["compilations"] > 0 and r["compilations"]["dynamic_graphs"] == 0
               for r in record["training"])
    assert record["ddp"]["world_size"] == 2 and set(record["price"]) >= PRICE_CONTRACT
