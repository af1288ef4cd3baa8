"""--restore: a published results.jsonl put back into a sweep's run directories."""

import json

import pytest
from fixtures.report.synthetic import make_record

from ffnbench.errors import ConfigError
from ffnbench.runs.result import RESULT_FILE
from ffnbench.sweep.restore import restore


def test_restore_replaces_only_an_unfinished_record(tmp_path):
    published = [make_record("gelu", s, 3.0 + s / 100) for s in (0, 1)]
    for i, r in enumerate(published):
        r["run_name"] = f"gelu-s{i}"
    results_file = tmp_path / "results.jsonl"
    results_file.write_text("".join(json.dumps(r) + "\n" for r in published))
    sweep_dir = tmp_path / "runs" / "x"
    (sweep_dir / "gelu-s1").mkdir(parents=True)
    (sweep_dir / "gelu-s1" / RESULT_FILE).write_text(json.dumps({**published[1], "status": "failed"}))
    assert restore(results_file, sweep_dir) == 2  # the failed local record is replaced by the finished one
    assert json.loads((sweep_dir / "gelu-s1" / RESULT_FILE).read_text())["status"] == "finished"
    assert restore(results_file, sweep_dir) == 0  # finished here: left alone
    with pytest.raises(ConfigError, match="--restore .*: no such file"):
        restore(tmp_path / "missing.jsonl", sweep_dir)
