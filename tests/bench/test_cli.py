"""ffnbench.bench.cli: the list of benchmarks and what each module exports, --only, --label, --threads, the device,
the machine block, the --help text and docs/benchmarks.md's table of the benchmarks."""

import contextlib
import dataclasses
import io
import re
from pathlib import Path

import pytest
import torch

from ffnbench.bench import cli
from ffnbench.bench.session import PRESETS
from ffnbench.errors import ConfigError

NAMES = [b.NAME for b in cli.BENCHMARKS]
DOC = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


@pytest.mark.parametrize("benchmark", cli.BENCHMARKS, ids=NAMES)
def test_every_benchmark_module_exports_what_the_command_line_uses(benchmark):
    assert benchmark.__name__.rsplit(".", 1)[1] == benchmark.NAME  # ffnbench/bench/<name>.py writes <name>.json
    assert benchmark.TITLE and benchmark.SUMMARY
    assert callable(benchmark.measure) and callable(benchmark.tables)
    assert set(benchmark.SIZES) == set(PRESETS)
    assert all(dataclasses.is_dataclass(s) for s in benchmark.SIZES.values())


def test_sizes_are_each_benchmarks_at_the_runs_preset():
    assert cli.sizes_for(True, True) == cli.sizes_for(True, False) == {b.NAME: b.SIZES["quick"] for b in cli.BENCHMARKS}
    assert cli.sizes_for(False, True) == {b.NAME: b.SIZES["gpu"] for b in cli.BENCHMARKS}
    assert cli.sizes_for(False, False) == {b.NAME: b.SIZES["cpu"] for b in cli.BENCHMARKS}


@pytest.mark.parametrize(
    ("text", "names"),
    [(None, NAMES), ("1,3", [NAMES[0], NAMES[2]]), (f"{NAMES[4]}, 2", [NAMES[1], NAMES[4]]), ("4,4", [NAMES[3]])],
)
def test_only_selects_benchmarks_by_number_or_name(text, names):
    assert cli.parse_only(text) == names


def test_bad_only_and_label_are_user_errors():
    with pytest.raises(ConfigError, match=f"unknown benchmark '{len(NAMES) + 1}'"):
        cli.parse_only(f"1,{len(NAMES) + 1}")
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
    from ffnbench.runs.provenance import machine_record, versions

    m = cli.machine("box", "cpu")
    assert m == {"label": "box", **machine_record("cpu"), "torch": versions()["torch"], "python": versions()["python"],
                 "versions": versions()}
    assert m["torch"] == torch.__version__


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


def test_help_lists_every_benchmark_by_number_name_and_file():
    text = cli.parser().format_help()
    listed = re.findall(r"^  (\d+) (\w+) ", text, flags=re.M)
    assert listed == [(str(i), b.NAME) for i, b in cli.numbered().items()]
    assert all(f"{name}.json" in text for name in NAMES)


def test_the_docs_table_lists_the_benchmarks_in_their_order():
    rows = re.findall(r"^\| (\d+) \| `(\w+)\.json` \|", DOC.read_text(), flags=re.M)
    assert rows == [(str(i), b.NAME) for i, b in cli.numbered().items()]
