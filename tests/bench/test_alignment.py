"""ffnbench.bench.alignment: its printed table, and one quick run's record as the report reads it for C9."""

import json

import pytest

from ffnbench.bench import alignment, cli
from ffnbench.tables import MISSING

from .checks import check_record, check_summary


def test_render_prints_title_padded_table_missing_values_and_notes():
    ms = {"median": 2.0, "iqr": 0.5}
    record = {"rows": [{"d_ff": 682, "multiple_of": 1, "ms": ms, "params": 1000, "ns_per_param": 2.0,
                        "tflops": float("nan")},
                       {"d_ff": 704, "multiple_of": 64, "ms": ms, "params": 12345, "ns_per_param": 1.0,
                        "tflops": 0.5}],
              "notes": ["first note", "second"]}
    number, _ = cli.find(alignment.NAME)
    lines = cli.render(alignment.NAME, record).splitlines()
    assert lines[:3] == ["", f"## {number}. d_ff alignment (claim C9)", ""]
    assert lines[3:7] == [
        "| d_ff | multiple of | ms (fwd+bwd) | params | ns/param | TFLOP/s | ns/param ÷ 682 |",
        "|------|-------------|--------------|--------|----------|---------|----------------|",
        f"| 682  |           1 |     2 ± 0.25 |  1,000 |        2 |       {MISSING} |          1.000 |",
        "| 704  |          64 |     2 ± 0.25 | 12,345 |        1 |     0.5 |          0.500 |"]
    assert lines[7:] == ["  first note", "  second"]


def test_quick_alignment_follows_the_report_schema(quick_run):
    data = check_record(quick_run("alignment"))
    machine = data["machine"]
    assert machine["accelerator"] == "cpu" and "gpu" not in machine
    assert isinstance(machine["cpu"], str) and isinstance(machine["torch"], str) and machine["label"] == "test-cpu"
    # the unaligned size, then aligned sizes below and above it (C9 compares 640 per parameter, 704 in time)
    assert [(r["d_ff"], r["multiple_of"]) for r in data["rows"]] == [(682, 1), (640, 128), (704, 64), (768, 256)]
    for row in data["rows"]:
        assert row["params"] == 3 * 64 * row["d_ff"]  # SwiGLU, no bias, d_model 64 (--quick)
        check_summary(row["ms"], n=3)
        assert (row["ms_median"], row["ms_iqr"]) == (row["ms"]["median"], row["ms"]["iqr"])
        assert row["ns_per_param"] == pytest.approx(row["ms_median"] * 1e6 / row["params"])


def test_quick_alignment_is_readable_by_the_report(quick_run):
    from ffnbench.claims import alignment_rows

    run = quick_run("alignment")
    table = alignment_rows(json.loads((run.folder / "alignment.json").read_text()))
    assert len(table) == 2 + 4
