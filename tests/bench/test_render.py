"""ffnbench.bench.render: the cells every benchmark's tables share, and the printed block."""

from ffnbench.bench import render
from ffnbench.tables import MISSING


def test_cells_show_the_median_and_half_the_iqr_a_goal_and_a_speedup():
    assert render.median_iqr({"median": 2.0, "iqr": 0.5}) == "2 ± 0.25"
    assert render.median_iqr({"median": 1234.4, "iqr": 10.0}, ".0f") == "1234 ± 5"
    assert render.median_iqr(None) == MISSING
    assert render.goal(True, "≥ 0.95") == "≥ 0.95 met" and render.goal(False, "≤ 10 s") == "≤ 10 s NOT met"
    assert render.speedup({"median": 1.234}) == "1.23×" and render.speedup(None) == MISSING


def test_a_block_is_the_title_its_tables_then_its_notes_indented():
    tables = [render.table(["a", "b"], [[1, "x"]]), "skipped: why"]
    assert render.block("7. Title", tables, ["first note", "second"]).splitlines() == [
        "", "## 7. Title", "", "| a | b |", "|---|---|", "| 1 | x |", "", "skipped: why", "  first note", "  second"]
