"""The outcome table of a sweep: each run's status as its result.json says it."""

import json

from rich.console import Console

from ffnbench.runs.result import RESULT_FILE
from ffnbench.sweep import planning
from ffnbench.sweep.outcome import print_outcome


def test_the_outcome_counts_what_each_result_says(tmp_path):
    runs = [planning.PlannedRun([], tmp_path / name, "start") for name in ("a", "b", "c", "d")]
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / RESULT_FILE).write_text(json.dumps({"status": "finished", "tokens": 100, "wall_time_s": 2.0,
                                                          "metrics": {"final_val_loss": 1.25}}))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / RESULT_FILE).write_text(json.dumps({"status": "diverged", "tokens": 50}))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / RESULT_FILE).write_text("{")
    console = Console(width=140, record=True)
    assert print_outcome(runs, console) == {"finished": 1, "diverged": 1, "corrupt": 1, "missing": 1}
    text = console.export_text()
    assert "1.2500" in text
    assert "runs by status: 1 corrupt, 1 diverged, 1 finished, 1 missing; 150 tokens; 2 s of training wall time" in text
