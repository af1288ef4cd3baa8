"""The performance benchmarks (ffnbench.bench): the timing helpers, the renderer, the command line, the two
contenders, and one --quick run of every benchmark on the CPU whose tables and JSON are checked for what was
measured (never for speed)."""

import contextlib
import io
import json
import math
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ffnbench.bench import cli, render, startup, timing
from ffnbench.bench.contenders import HandLoop, Pipeline, pipeline_overrides
from ffnbench.bench.session import BenchSession, sizes_for
from ffnbench.errors import ConfigError
from ffnbench.tables import MISSING

MACHINE_KEYS = {"label", "hostname", "accelerator", "cpu", "cpu_count", "torch_threads", "torch", "python",
                "versions"}
TITLES = ["## 1. Pipeline overhead", "## 2. MFU", "## 3. FFN variants at matched budget",
          "## 4. d_ff alignment (claim C9)", "## 5. Startup", "## 6. Parallel runs on a CPU"]


# ---- timing -----------------------------------------------------------------------------------------------


def test_quartiles_median_iqr_and_count():
    s = timing.quartiles([4.0, 1.0, 3.0, 2.0, 5.0])
    assert s == {"median": 3.0, "iqr": 2.0, "q1": 2.0, "q3": 4.0, "min": 1.0, "max": 5.0, "n": 5}
    assert timing.quartiles([7])["iqr"] == 0.0 and timing.quartiles([7])["median"] == 7.0
    with pytest.raises(ValueError):
        timing.quartiles([])


def test_interleaved_alternates_the_order_every_round():
    calls = []
    trials = {name: (lambda name=name: calls.append(name) or len(calls)) for name in "ABC"}
    results = timing.interleaved(trials, reps=3)
    assert calls == list("ABC" "CBA" "ABC")
    assert results == {"A": [1, 6, 7], "B": [2, 5, 8], "C": [3, 4, 9]}


def test_paired_ratios_pair_repetitions():
    assert timing.paired_ratios([2.0, 3.0], [1.0, 4.0]) == [2.0, 0.75]
    with pytest.raises(ValueError):
        timing.paired_ratios([1.0], [1.0, 2.0])


def test_time_call_divides_the_clock_by_the_inner_calls():
    now = [10.0]

    def call():  # each call takes 0.25 s of the fake clock
        now[0] += 0.25

    seconds = timing.time_call(call, torch.device("cpu"), inner=4, clock=lambda: now[0])
    assert now[0] == 11.0 and seconds == 0.25


def test_cpu_ticks_sum_all_fields_and_count_iowait_as_idle(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 5 50 800 20 0 3 0 0 0\ncpu0 50 2 25 400 10 0 1 0 0 0\n")
    assert timing.cpu_ticks(stat) == (978, 820)
    stat.write_text("garbage\n")
    assert timing.cpu_ticks(stat) is None
    assert timing.cpu_ticks(tmp_path / "missing") is None


# ---- renderer ---------------------------------------------------------------------------------------------


def test_render_prints_title_padded_table_missing_values_and_notes():
    ms = {"median": 2.0, "iqr": 0.5}
    record = {"rows": [{"d_ff": 682, "multiple_of": 1, "ms": ms, "params": 1000, "ns_per_param": 2.0,
                        "tflops": float("nan")},
                       {"d_ff": 704, "multiple_of": 64, "ms": ms, "params": 12345, "ns_per_param": 1.0,
                        "tflops": 0.5}],
              "notes": ["first note", "second"]}
    lines = render.render("alignment", record).splitlines()
    assert lines[:3] == ["", "## 4. d_ff alignment (claim C9)", ""]
    assert lines[3:7] == [
        "| d_ff | multiple of | ms (fwd+bwd) | params | ns/param | TFLOP/s | ns/param ÷ 682 |",
        "|------|-------------|--------------|--------|----------|---------|----------------|",
        f"| 682  |           1 |     2 ± 0.25 |  1,000 |        2 |       {MISSING} |          1.000 |",
        "| 704  |          64 |     2 ± 0.25 | 12,345 |        1 |     0.5 |          0.500 |"]
    assert lines[7:] == ["  first note", "  second"]
    assert render.median_iqr(None) == MISSING


# ---- command line -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "names"),
    [(None, list(cli.BENCHMARKS.values())), ("1,3", ["overhead", "variants"]),
     ("startup, 2", ["mfu", "startup"]), ("4,4", ["alignment"])],
)
def test_only_selects_benchmarks_by_number_or_name(text, names):
    assert cli.parse_only(text) == names


def test_bad_only_and_label_are_user_errors():
    with pytest.raises(ConfigError, match="unknown benchmark '9'"):
        cli.parse_only("1,9")
    with pytest.raises(ConfigError, match="--label"):
        cli.check_label("a/b")
    assert cli.check_label("cpu-2core-epyc") == "cpu-2core-epyc"


@pytest.mark.parametrize(("argv", "message"), [
    (["--only", "nope"], "ffnbench: error: --only: unknown benchmark 'nope'"),
    (["--device", "tpu"], "ffnbench: error: --device: expected auto, cpu or gpu, got 'tpu'"),
    (["--threads", "0"], "ffnbench: error: --threads: expected a positive number of threads, got 0"),
])
def test_command_line_errors_are_one_line_and_exit_2(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a machine without a GPU")
def test_asking_for_a_gpu_without_one_is_a_user_error(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--device", "cuda", "--only", "4"])
    assert e.value.code == 2 and "--device=cuda: no CUDA GPU is visible here" in capsys.readouterr().err


def test_machine_block_is_records_hardware_with_label_and_versions():
    from ffnbench.records import hardware, versions

    m = cli.machine("box", "cpu")
    assert m == {"label": "box", **hardware("cpu"), "torch": versions()["torch"], "python": versions()["python"],
                 "versions": versions()}
    assert m["torch"] == torch.__version__


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
    """Every benchmark at --quick sizes, into a temporary folder, on a temporary data cache."""
    root = tmp_path_factory.mktemp("bench")
    mp = pytest.MonkeyPatch()
    mp.setenv("FFNBENCH_CACHE", str(root / "cache"))
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            results = cli.main(["--quick", "--out", str(root / "out"), "--label", "test-cpu", "--device", "cpu"])
    finally:
        mp.undo()
    return root / "out" / "test-cpu", results, out.getvalue()


def _positive_finite(x) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


def _check_summary(s, n: int | None = None) -> None:
    assert set(s) == {"median", "iqr", "q1", "q3", "min", "max", "n"}
    assert _positive_finite(s["median"]) and s["iqr"] >= 0 and s["min"] <= s["q1"] <= s["median"] <= s["q3"]
    assert s["n"] == n if n is not None else s["n"] >= 1


def test_quick_run_prints_every_table_and_writes_every_file(quick_run):
    folder, results, printed = quick_run
    for title in TITLES:
        assert title in printed
    names = ["overhead", "mfu", "variants", "alignment", "startup", "parallel"]
    assert sorted(p.stem for p in folder.glob("*.json")) == sorted(names)
    for name in names:
        data = json.loads((folder / f"{name}.json").read_text())
        assert data == json.loads(json.dumps(results[name]))
        assert render.render(name, data) in printed  # the terminal shows what the file holds
        assert list(data)[:9] == ["benchmark", "machine", "command", "git", "date", "quick", "settings", "load", "rows"]
        assert data["benchmark"] == name and data["quick"] is True and data["notes"]
        assert set(data["machine"]) >= MACHINE_KEYS
        assert data["machine"]["label"] == "test-cpu" and data["machine"]["accelerator"] == "cpu"
        assert data["machine"]["torch"] == torch.__version__
        argv = f"--quick --out {folder.parent} --label test-cpu --device cpu"
        assert data["command"] == f"python -m ffnbench.bench {argv}"
        assert set(data["git"]) == {"revision", "dirty"}  # the code measured
        assert isinstance(data["settings"], dict) and data["rows"]
        assert set(data["load"]) == {"before", "after", "during"}


def test_quick_overhead_ratio(quick_run):
    folder, _, _ = quick_run
    record = json.loads((folder / "overhead.json").read_text())
    (row,) = record["rows"]  # the GPU-sized step alone (at --quick sizes it is micro, at whatever batch it took)
    sizes = sizes_for(True, False)
    assert sizes.overhead_models == ()
    assert (row["model"], row["gpu_sized"]) == ("micro", True)  # the only candidate at --quick sizes
    assert (row["warmup_steps"], row["window_steps"], row["windows"]) == sizes.overhead_steps["micro"]
    windows = row["windows"]
    for key in ("hand_tokens_per_s", "pipeline_tokens_per_s", "ratio", "hand_ms_per_step"):
        _check_summary(row[key], n=windows)
    assert len(row["raw"]["hand"]) == len(row["raw"]["pipeline"]) == windows
    ratios = sorted(p / h for p, h in zip(row["raw"]["pipeline"], row["raw"]["hand"]))
    assert row["ratio"]["median"] == pytest.approx(sum(ratios) / 2)  # the paired ratio, not a ratio of medians
    # the hand loop trained exactly what the pipeline trained, alternating with it in one process
    assert row["final_train_loss"]["hand"] == row["final_train_loss"]["pipeline"]
    _check_summary(row["val_stats_ratio"], n=max(3, sizes.overhead_reps))
    assert row["meets_goal"] is (row["ratio"]["median"] >= 0.95)
    # the only preset at --quick sizes (at a smaller batch too, on a machine too slow for 2-10 ms at the user's)
    assert all(label.startswith("micro") for label in record["settings"]["gpu_sized_candidates_ms"])
    prof = record["profile"]
    assert prof["model"] == "micro" and prof["steps"] == sizes.overhead_profile_steps
    assert prof["batch_size"] == row["batch_size"]  # profiled at the GPU-sized row's batch
    assert prof["pipeline_calls_per_step"] > prof["hand_calls_per_step"] > 0 and prof["top_beyond_hand"]
    assert any(note.startswith("profile after") for note in record["notes"])
    assert any(note.startswith("profile before") for note in record["notes"])
    floor = record["lightning_floor"]
    assert floor["steps"] == sizes.overhead_floor_steps and floor["hand"]["n"] == floor["lightning"]["n"] > 0
    assert floor["extra_ms_per_step"]["median"] == floor["lightning"]["median"] - floor["hand"]["median"]
    assert any(note.startswith("Lightning's own loop") for note in record["notes"])


def test_threads_are_set_and_recorded(tmp_path):
    before = torch.get_num_threads()
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            results = cli.main(["--threads", "1", "--only", "alignment", "--quick", "--device", "cpu",
                                "--out", str(tmp_path), "--label", "t"])
        assert results["alignment"]["machine"]["torch_threads"] == 1
        assert "--threads 1" in results["alignment"]["command"]
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(("steps_ms", "expected", "tried"), [
    # micro inside the range, tiny above it: the search stops at tiny; micro is nearer the middle (4.47 ms)
    ({("micro", None): 5.0, ("tiny", None): 150.0}, ("micro", None), ["micro", "tiny"]),
    # a GPU: micro below the range, tiny and small inside it; small is nearer the middle
    ({("micro", None): 1.0, ("tiny", None): 2.5, ("small", None): 6.0}, ("small", None), ["micro", "tiny", "small"]),
    # a slow machine: even micro is above the range at the user's batch; its batch is halved until below the middle,
    # and the nearest to the middle is taken
    ({("micro", None): 40.0, ("micro", 16): 21.0, ("micro", 8): 9.0, ("micro", 4): 5.5, ("micro", 2): 4.0},
     ("micro", 2), ["micro", "micro (batch 16)", "micro (batch 8)", "micro (batch 4)", "micro (batch 2)"]),
    ({("micro", None): 12.0, ("micro", 16): 6.0, ("micro", 8): 3.0}, ("micro", 16),
     ["micro", "micro (batch 16)", "micro (batch 8)"]),
])
def test_the_gpu_sized_step_is_chosen_by_measured_step_time(monkeypatch, tmp_path, steps_ms, expected, tried):
    from ffnbench.bench import overhead

    session = BenchSession(device=torch.device("cpu"), quick=False, sizes=sizes_for(False, False), work=tmp_path,
                           cache_dir=tmp_path / "cache")
    monkeypatch.setattr(overhead, "hand_step_ms", lambda session, model, batch=None: steps_ms[(model, batch)])
    model, batch, measured = overhead.choose_gpu_sized(session)
    assert (model, batch) == expected and list(measured) == tried


class CountingLoop:
    """What Alternation asks of a hand loop: a device, tokens per step, and steps (counted; each one advances the
    fake clock by `seconds`)."""

    def __init__(self, clock, seconds):
        self.device, self.tokens_per_step, self.steps = torch.device("cpu"), 64, 0
        self.clock, self.seconds = clock, seconds

    def step(self):
        self.steps += 1
        self.clock[0] += self.seconds


def test_alternation_times_both_contenders_in_every_round_and_trains_the_hand_loop_as_long(monkeypatch):
    from ffnbench.bench import contenders

    clock = [0.0]
    monkeypatch.setattr(contenders.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock[0])
    loop = CountingLoop(clock, seconds=1.0)  # the hand loop: 1 s a step; the pipeline: 2 s a step (below)
    run = contenders.Alternation(loop, warmup=4, window=6, windows=5, k=2)
    monkeypatch.setattr(contenders, "time_call", lambda fn, device, inner: timing.time_call(
        fn, device, inner, clock=lambda: clock[0]))
    for step in range(2, run.total_steps + 1, 2):  # the pipeline's batches of 2 steps, as Lightning calls the hook
        clock[0] += 2.0 * 2
        run.callback.on_train_batch_end(SimpleNamespace(global_step=step), None, None, None, step // 2 - 1)
    assert run.total_steps == 4 + 5 * 6 and loop.steps == run.total_steps  # same length
    assert run.tokens_per_s() == {"hand": [64 / 1.0] * 5, "pipeline": [64 / 2.0] * 5}  # warm-up not timed
    with pytest.raises(ValueError, match="multiples of the batch, 4 steps"):
        contenders.Alternation(loop, warmup=4, window=6, windows=5, k=4)


def test_quick_mfu(quick_run):
    folder, _, _ = quick_run
    data = json.loads((folder / "mfu.json").read_text())
    peak = data["peak"]
    assert peak["peak_flops"] == max(data["rows"][0]["raw"]["probe"])  # the best probe reading
    for row in data["rows"]:
        assert _positive_finite(row["flops_per_token"])
        for key in ("hand_mfu", "pipeline_mfu", "hand_tokens_per_s", "pipeline_tokens_per_s"):
            _check_summary(row[key], n=2)
        assert row["pipeline_mfu"]["median"] == pytest.approx(
            row["pipeline_tokens_per_s"]["median"] * row["flops_per_token"] / peak["peak_flops"])


def test_quick_variants(quick_run):
    """At ffn.budget=4 and micro's d_model=32: gelu has d_ff = 4·32 = 128 and 2·32·128 params; swiglu has
    d_ff = round(2/3·128) = 85 and 3·32·85 params, a mismatch within one rounding step (3·d params)."""
    folder, _, _ = quick_run
    rows = {r["variant"]: r for r in json.loads((folder / "variants.json").read_text())["rows"]}
    assert set(rows) == {"gelu", "swiglu"}
    target = 2 * 32 * 128
    assert (rows["gelu"]["d_ff"], rows["gelu"]["ffn_params_per_layer"]) == (128, target)
    assert (rows["swiglu"]["d_ff"], rows["swiglu"]["ffn_params_per_layer"]) == (85, 3 * 32 * 85)
    for row, matrices in ((rows["gelu"], 2), (rows["swiglu"], 3)):
        assert row["budget_mismatch"] == pytest.approx((row["ffn_params_per_layer"] - target) / target)
        assert abs(row["budget_mismatch"]) <= matrices * 32 / target  # two-sided: at most one rounding step
        _check_summary(row["layer_eager_ms"], n=2)
        _check_summary(row["step_eager_ms"], n=2)
    _check_summary(rows["gelu"]["layer_compiled_ms"], n=2)  # compiled in --quick for gelu only
    _check_summary(rows["gelu"]["step_compile_speedup"], n=2)
    assert rows["swiglu"]["layer_compiled_ms"] is None and rows["swiglu"]["step_compile_speedup"] is None
    assert rows["gelu"]["step_vs_gelu"] == 1.0


def test_quick_alignment_follows_the_report_schema(quick_run):
    folder, _, _ = quick_run
    data = json.loads((folder / "alignment.json").read_text())
    machine = data["machine"]
    assert machine["accelerator"] == "cpu" and "gpu" not in machine
    assert isinstance(machine["cpu"], str) and isinstance(machine["torch"], str) and machine["label"] == "test-cpu"
    # the unaligned size, then aligned sizes below and above it (C9 compares 640 per parameter, 704 in time)
    assert [(r["d_ff"], r["multiple_of"]) for r in data["rows"]] == [(682, 1), (640, 128), (704, 64), (768, 256)]
    for row in data["rows"]:
        assert row["params"] == 3 * 64 * row["d_ff"]  # SwiGLU, no bias, d_model 64 (--quick)
        _check_summary(row["ms"], n=3)
        assert (row["ms_median"], row["ms_iqr"]) == (row["ms"]["median"], row["ms"]["iqr"])
        assert row["ns_per_param"] == pytest.approx(row["ms_median"] * 1e6 / row["params"])


def test_quick_alignment_is_readable_by_the_report(quick_run):
    from ffnbench.claims import alignment_rows

    folder, _, _ = quick_run
    table = alignment_rows(json.loads((folder / "alignment.json").read_text()))
    assert len(table) == 2 + 4


def test_quick_startup(quick_run):
    folder, _, _ = quick_run
    data = json.loads((folder / "startup.json").read_text())
    (row,) = data["rows"]
    assert row["what"] == "csv"
    _check_summary(row["to_first_step_s"], n=1)
    events = row["events_s"]
    assert set(events) == set(startup.STARTUP_EVENTS)
    order = [events[e]["median"] for e in startup.STARTUP_EVENTS]
    assert order == sorted(order)  # train() starts, data ready, first step starts, ends, process exits
    assert [r["what"] for r in data["data"]] == ["first tokenization in a fresh process (one-time imports included)",
                                                 "tokenization (empty cache)", "cached load (verify + memory-map)"]
    for r in data["data"]:
        _check_summary(r["seconds"], n=1)


# ---- the contenders are fair ----------------------------------------------------------------------------


def _quick_session(tmp_path) -> BenchSession:
    return BenchSession(device=torch.device("cpu"), quick=True, sizes=sizes_for(True, False), work=tmp_path,
                        cache_dir=tmp_path / "cache")


def test_hand_loop_trains_exactly_what_the_pipeline_trains(tmp_path):
    """Same model, batches, AdamW, schedule and clipping: the hand loop's loss at the last step equals, bit for bit,
    the one the pipeline's train() records."""
    session = _quick_session(tmp_path)
    pipeline = Pipeline(session, pipeline_overrides(session, "micro"), 2, 13)
    assert (pipeline.warmup, pipeline.steps) == (10, 20)  # whole batches of trainer.inner_steps (10)
    assert pipeline() > 0
    assert pipeline.last_result.steps == 30
    loop = HandLoop(session, pipeline.cfg)
    for _ in range(30):
        loop.step()
    assert loop.loss.item() == pipeline.last_result.metrics["final_train_loss"]


def test_token_windows_read_the_corpus_without_copying_it(tmp_path):
    from ffnbench.data import LMDataModule, TokenWindows

    session = _quick_session(tmp_path)
    cfg = Pipeline(session, pipeline_overrides(session, "micro"), 0, 1).cfg
    dm = LMDataModule(cfg.data, seq_len=32, seed=0)
    dm.prepare_data()
    dm.setup("fit")
    windows = TokenWindows(dm.train_tokens, 32)
    assert windows._view.data_ptr() == dm.train_tokens.ctypes.data  # a view of the memory map, not a copy
    x, y = windows(torch.tensor([0, 5]))
    assert torch.equal(x[:, 1:], y[:, :-1]) and x.shape == (2, 32)


# ---- make gpu-check: what can be checked without a GPU ----------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a machine without a GPU")
def test_gpu_check_on_a_cpu_exits_2_with_one_line(capsys, tmp_path):
    from ffnbench.bench import gpucheck

    with pytest.raises(SystemExit) as e:
        gpucheck.main(["--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert err.startswith("ffnbench: error: make gpu-check needs a CUDA GPU; none is visible here (")
    assert not any(tmp_path.iterdir())
    makefile = (Path(__file__).resolve().parent.parent / "Makefile").read_text()
    assert "\ngpu-check: " in makefile and "-m ffnbench.bench.gpucheck" in makefile


def test_compile_problems_are_read_from_dynamo_counters():
    """Real dynamo on the CPU (the eager backend: graphs are captured, nothing is code-generated)."""
    from ffnbench.bench.gpucheck import compile_problems, dynamo_snapshot

    torch._dynamo.reset()

    def block(x):
        return torch.relu(x) * 2

    compiled = torch.compile(block, backend="eager", dynamic=False)
    start = dynamo_snapshot()
    compiled(torch.ones(4))
    warm = dynamo_snapshot()
    compiled(torch.ones(4))
    assert compile_problems(start, warm, dynamo_snapshot()) == []  # compiled once, in warm-up
    compiled(torch.ones(8))  # a new shape after warm-up: a recompile in the timed steps
    assert compile_problems(start, warm, dynamo_snapshot()) == ["1 graph(s) compiled after warm-up (a recompile in "
                                                                "the timed steps)"]

    def broken(x):
        x = torch.relu(x)
        torch._dynamo.graph_break()
        return x * 2

    start = dynamo_snapshot()
    torch.compile(broken, backend="eager")(torch.ones(4))
    end = dynamo_snapshot()
    assert any("graph break(s), part of a block ran eager" in p for p in compile_problems(start, end, end))
    assert compile_problems(end, end, end) == ["nothing was compiled: every block ran eager"]
    gave_up = {**end, "frames": end["frames"] + 2, "frames_ok": end["frames_ok"] + 1, "graphs": end["graphs"] + 1}
    assert compile_problems(end, gave_up, gave_up) == ["1 frame(s) dynamo gave up on ran eager"]
    torch._dynamo.reset()


@pytest.mark.slow
def test_the_compile_watch_passes_a_compiled_cpu_run(tmp_path):
    """gpu-check's training check, driven through train() on the CPU with the micro model: every block compiled,
    no recompile after warm-up, a finished run with its throughput."""
    from ffnbench.bench import gpucheck

    session = BenchSession(device=torch.device("cpu"), quick=True, sizes=sizes_for(True, False), work=tmp_path,
                           cache_dir=tmp_path / "cache")
    row = gpucheck.train_check(session, "micro", steps=6, warmup=2)
    assert row["problems"] == [] and row["status"] == "finished" and row["tokens_per_s"] > 0
    assert row["dynamo"]["graphs"] > 0


def test_the_gpu_check_record_goes_under_the_gpus_name(tmp_path):
    from ffnbench.bench import gpucheck

    assert gpucheck.gpu_label("NVIDIA H200 NVL") == "nvidia-h200-nvl"
    assert gpucheck.gpu_label("Tesla V100-SXM2-32GB") == "tesla-v100-sxm2-32gb"
    path = gpucheck.write_record(tmp_path / "nvidia-h200", {"ok": True, "mfu": float("nan")})
    assert path == tmp_path / "nvidia-h200" / "gpucheck.json"
    assert json.loads(path.read_text()) == {"ok": True, "mfu": None}
    summary = gpucheck.summarize({"alignment": {"rows": [{"d_ff": 682, "ms_median": 1.5, "ns_per_param": 2.0}]}})
    assert summary == {"alignment": [{"d_ff": 682, "ms": 1.5, "ns_per_param": 2.0}]}


@pytest.mark.parametrize("sizes_of", ["quick", "cpu", "gpu", "gpu-check"])
def test_every_model_the_overhead_benchmark_can_time_has_its_window_sizes(sizes_of):
    # compare() unpacks (warm-up, steps per window, windows) for the GPU-sized candidates and the other rows alike;
    # `make gpu-check` once replaced them with a two-number entry for small only.
    from ffnbench.bench.gpucheck import check_sizes
    from ffnbench.bench.session import sizes_for

    sizes = {"quick": lambda: sizes_for(True, False), "cpu": lambda: sizes_for(False, False),
             "gpu": lambda: sizes_for(False, True), "gpu-check": lambda: check_sizes(False)}[sizes_of]()
    for model in (*sizes.overhead_gpu_sized, *sizes.overhead_models):
        warmup, window, windows = sizes.overhead_steps[model]
        assert warmup >= 1 and window >= 1 and windows >= 2, (model, sizes.overhead_steps[model])


def test_quick_parallel_times_one_run_alone_and_two_at_once(quick_run):
    folder, _, _ = quick_run
    data = json.loads((folder / "parallel.json").read_text())
    if (os.cpu_count() or 1) < 2:
        assert data["rows"][0]["what"] == "skipped"
        return
    alone, together = data["rows"]
    assert (alone["jobs"], together["jobs"]) == (1, 2) and together["threads"] == (os.cpu_count() or 1) // 2
    for row in (alone, together):
        _check_summary(row["tokens_per_s_total"], 1)
    ratio = together["tokens_per_s_ratio"]["median"]
    assert ratio == pytest.approx(together["tokens_per_s_total"]["median"] / alone["tokens_per_s_total"]["median"])
    assert _positive_finite(together["runs_per_hour_ratio"]["median"])


def test_gpu_check_trains_the_gpu_sweeps_own_shape():
    """The sweeps run `small` with an 8192-token BPE vocabulary (conf/experiment/_gpu.yaml), where the head and loss
    weigh; gpu-check's MFU came from Shakespeare bytes (vocab 256) alone, where the head costs nothing."""
    from ffnbench.bench import gpucheck
    from ffnbench.config.compose import compose

    model, extra = gpucheck.SWEEP_SHAPE
    sweep = compose(["experiment=activations"])
    shape = compose([f"model={model}", *extra])
    assert (shape.model.name, shape.data.tokenizer, shape.data.vocab_size) == (
        sweep.model.name, sweep.data.tokenizer, sweep.data.vocab_size)
