"""The performance benchmarks: the statistics and timing helpers, the command line, and one --quick run of all
five benchmarks on the CPU whose tables and JSON are checked for structure (never for speed)."""

import contextlib
import io
import json
import math

import pytest
import torch

from ffnbench import bench
from ffnbench.errors import ConfigError

MACHINE_KEYS = {"label", "hostname", "accelerator", "gpu", "cpu", "cores", "threads", "torch"}
TITLES = ["## 1. Pipeline overhead", "## 2. MFU", "## 3. FFN variants at matched budget",
          "## 4. d_ff alignment (claim C9)", "## 5. Startup"]


# ---- helpers ----------------------------------------------------------------------------------------------


def test_summarize_median_quartiles_and_count():
    s = bench.summarize([4.0, 1.0, 3.0, 2.0, 5.0])
    assert s == {"median": 3.0, "iqr": 2.0, "q1": 2.0, "q3": 4.0, "min": 1.0, "max": 5.0, "n": 5}
    assert bench.summarize([7])["iqr"] == 0.0 and bench.summarize([7])["median"] == 7.0
    with pytest.raises(ValueError):
        bench.summarize([])


def test_interleaved_alternates_the_order_every_round():
    calls = []
    trials = {name: (lambda name=name: calls.append(name) or len(calls)) for name in "ABC"}
    results = bench.interleaved(trials, reps=3)
    assert calls == list("ABC" "CBA" "ABC")
    assert results == {"A": [1, 6, 7], "B": [2, 5, 8], "C": [3, 4, 9]}


def test_paired_ratios_pair_repetitions():
    assert bench.paired_ratios([2.0, 3.0], [1.0, 4.0]) == [2.0, 0.75]
    with pytest.raises(ValueError):
        bench.paired_ratios([1.0], [1.0, 2.0])


def test_time_call_runs_inner_calls_and_returns_seconds_per_call():
    calls = []
    seconds = bench.time_call(lambda: calls.append(1), torch.device("cpu"), inner=5)
    assert len(calls) == 5 and 0 <= seconds < 1


def test_cpu_busy_fraction_is_a_fraction():
    busy = bench.cpu_busy_fraction(0.05)
    assert busy is None or 0.0 <= busy <= 1.0


def test_format_table_pads_columns():
    lines = bench.format_table(["a", "long header"], [["x", 1], ["yyyy", 22]]).splitlines()
    assert lines[0] == "| a    | long header |"
    assert lines[2] == "| x    |           1 |" and lines[3] == "| yyyy |          22 |"
    assert len({len(line) for line in lines}) == 1


@pytest.mark.parametrize(
    ("text", "names"),
    [(None, list(bench.BENCHMARKS.values())), ("1,3", ["overhead", "variants"]),
     ("startup, 2", ["mfu", "startup"]), ("4,4", ["alignment"])],
)
def test_only_selects_benchmarks_by_number_or_name(text, names):
    assert bench.parse_only(text) == names


def test_bad_only_label_and_device_are_user_errors():
    with pytest.raises(ConfigError, match="unknown benchmark '9'"):
        bench.parse_only("1,9")
    with pytest.raises(ConfigError, match="--label"):
        bench.check_label("a/b")
    assert bench.check_label("cpu-2core-epyc") == "cpu-2core-epyc"
    with pytest.raises(ConfigError, match="--device"):
        bench.resolve_device("tpu")
    assert bench.resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA GPU"):
            bench.resolve_device("cuda")


def test_command_line_errors_are_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(["--only", "nope"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("ffnbench: error: --only") and "Traceback" not in err


def test_step_times_are_off_unless_asked(monkeypatch, tmp_path):
    from ffnbench.callbacks import STEP_TIMES_ENV, StepTimes

    monkeypatch.delenv(STEP_TIMES_ENV, raising=False)
    assert StepTimes.from_env() is None
    monkeypatch.setenv(STEP_TIMES_ENV, str(tmp_path / "marks.jsonl"))
    marks = StepTimes.from_env()
    marks.mark("train_start")
    marks.mark("train_start")  # each event once
    lines = [json.loads(line) for line in (tmp_path / "marks.jsonl").read_text().splitlines()]
    assert [m["event"] for m in lines] == ["train_start"] and lines[0]["time"] > 0


# ---- one quick run of everything ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """All five benchmarks at --quick sizes, into a temporary folder, on a temporary data cache."""
    root = tmp_path_factory.mktemp("bench")
    mp = pytest.MonkeyPatch()
    mp.setenv("FFNBENCH_CACHE", str(root / "cache"))
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            results = bench.main(["--quick", "--out", str(root / "out"), "--label", "test-cpu", "--device", "cpu"])
    finally:
        mp.undo()
    return root / "out" / "test-cpu", results, out.getvalue()


def _positive_finite(x) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


def _check_summary(s) -> None:
    assert set(s) >= {"median", "iqr", "n"}
    assert _positive_finite(s["median"]) and s["iqr"] >= 0 and s["n"] >= 1


def test_quick_run_prints_five_tables_and_writes_five_files(quick_run):
    folder, results, printed = quick_run
    for title in TITLES:
        assert title in printed
    assert printed.count("\n| ") >= 10  # table rows
    names = ["overhead", "mfu", "variants", "alignment", "startup"]
    assert sorted(p.stem for p in folder.glob("*.json")) == sorted(names)
    for name in names:
        data = json.loads((folder / f"{name}.json").read_text())
        assert data == json.loads(json.dumps(results[name]))
        assert data["benchmark"] == name and data["quick"] is True
        assert set(data["machine"]) >= MACHINE_KEYS
        assert data["machine"]["label"] == "test-cpu" and data["machine"]["accelerator"] == "cpu"
        assert data["machine"]["torch"] == torch.__version__
        assert data["command"].startswith("python -m ffnbench.bench") and data["date"]
        assert isinstance(data["settings"], dict) and data["rows"]
        assert set(data["load"]) == {"before", "after", "during"}


def test_quick_overhead_ratio(quick_run):
    folder, _, _ = quick_run
    row = json.loads((folder / "overhead.json").read_text())["rows"][0]
    for key in ("hand_tokens_per_s", "pipeline_tokens_per_s", "ratio", "val_stats_ratio"):
        _check_summary(row[key])
    assert row["ratio"]["n"] == len(row["raw"]["hand"]) == len(row["raw"]["pipeline"])
    assert isinstance(row["meets_goal"], bool)


def test_quick_mfu(quick_run):
    folder, _, _ = quick_run
    data = json.loads((folder / "mfu.json").read_text())
    assert _positive_finite(data["peak"]["peak_flops"]) and "probe" in data["peak"]
    for row in data["rows"]:
        assert _positive_finite(row["flops_per_token"])
        for key in ("hand_mfu", "pipeline_mfu", "hand_tokens_per_s", "pipeline_tokens_per_s"):
            _check_summary(row[key])


def test_quick_variants(quick_run):
    folder, _, _ = quick_run
    rows = {r["variant"]: r for r in json.loads((folder / "variants.json").read_text())["rows"]}
    assert set(rows) == {"gelu", "swiglu"}
    assert rows["gelu"]["ffn_params_per_layer"] <= rows["swiglu"]["ffn_params_per_layer"] * 1.02  # matched budget
    for row in rows.values():
        _check_summary(row["layer_eager_ms"])
        _check_summary(row["step_eager_ms"])
    _check_summary(rows["gelu"]["layer_compiled_ms"])  # compiled in --quick for gelu only
    _check_summary(rows["gelu"]["step_compile_speedup"])
    assert rows["swiglu"]["layer_compiled_ms"] is None


def test_quick_alignment_follows_the_report_schema(quick_run):
    folder, _, _ = quick_run
    data = json.loads((folder / "alignment.json").read_text())
    machine = data["machine"]
    assert machine["accelerator"] in ("cpu", "gpu") and machine["gpu"] is None
    assert isinstance(machine["cpu"], str) and isinstance(machine["torch"], str) and machine["label"] == "test-cpu"
    assert [(r["d_ff"], r["multiple_of"]) for r in data["rows"]] == [(682, 1), (704, 64), (768, 256)]
    for row in data["rows"]:
        assert {"d_ff", "multiple_of", "ms_median", "ms_iqr", "params", "ns_per_param"} <= set(row)
        assert isinstance(row["d_ff"], int) and isinstance(row["params"], int)
        assert _positive_finite(row["ms_median"]) and row["ms_iqr"] >= 0 and _positive_finite(row["ns_per_param"])
        assert row["ns_per_param"] == pytest.approx(row["ms_median"] * 1e6 / row["params"])


def test_quick_alignment_is_readable_by_the_report(quick_run):
    from ffnbench.claims import _alignment_rows

    folder, _, _ = quick_run
    table = _alignment_rows(json.loads((folder / "alignment.json").read_text()))
    assert len(table) == 2 + 3


def test_quick_startup(quick_run):
    folder, _, _ = quick_run
    data = json.loads((folder / "startup.json").read_text())
    (row,) = data["rows"]
    _check_summary(row["to_first_step_s"])
    events = row["events_s"]
    assert set(events) == set(bench.STARTUP_EVENTS)
    order = [events[e]["median"] for e in bench.STARTUP_EVENTS]
    assert order == sorted(order)  # train() starts, data ready, first step starts, ends, process exits
    what = {r["what"] for r in data["data"]}
    assert any("cached" in w for w in what) and any("tokeniz" in w for w in what)
    for r in data["data"]:
        _check_summary(r["seconds"])


# ---- the contenders are fair ----------------------------------------------------------------------------


def _quick_ctx(tmp_path):
    ctx = bench.Context(label="t", out=tmp_path / "out", device=torch.device("cpu"), quick=True, command="test",
                        work=tmp_path, cache_dir=tmp_path / "cache", sizes=bench.sizes_for(True, False))
    ctx.machine = bench.machine_info("t", ctx.device)
    return ctx


def test_hand_loop_trains_exactly_what_the_pipeline_trains(tmp_path):
    """Same model, batches, AdamW, schedule and clipping: the hand loop's loss at the last step equals, bit for bit,
    the one the pipeline's train() records."""
    ctx = _quick_ctx(tmp_path)
    pipeline = bench.Pipeline(ctx, bench.pipeline_overrides(ctx, "micro"), 2, 3)
    assert pipeline() > 0
    loop = bench.HandLoop(ctx, pipeline.cfg)
    for _ in range(5):
        loop.step()
    assert loop.loss.item() == pipeline.last_result["metrics"]["final_train_loss"]


def test_token_windows_read_the_corpus_without_copying_it(tmp_path):
    from ffnbench.data import LMDataModule, TokenWindows

    ctx = _quick_ctx(tmp_path)
    cfg = bench.Pipeline(ctx, bench.pipeline_overrides(ctx, "micro"), 0, 1).cfg
    dm = LMDataModule(cfg.data, seq_len=32, seed=0)
    dm.prepare_data()
    dm.setup("fit")
    windows = TokenWindows(dm.train_tokens, 32)
    assert windows._view.data_ptr() == dm.train_tokens.ctypes.data  # a view of the memory map, not a copy
    x, y = windows(torch.tensor([0, 5]))
    assert torch.equal(x[:, 1:], y[:, :-1]) and x.shape == (2, 32)
