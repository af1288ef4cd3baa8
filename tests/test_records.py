"""Run records: atomic JSON, NaN as null, tolerant reads that name the problem."""

import json
import math

import pytest

from ffnbench.records import CorruptRecord, json_safe, read_result, write_json_atomic


def test_write_is_atomic_and_readable(tmp_path):
    path = tmp_path / "run" / "result.json"
    write_json_atomic(path, {"status": "finished", "loss": 1.5})
    assert json.loads(path.read_text()) == {"status": "finished", "loss": 1.5}
    assert not list(path.parent.glob(".*.tmp"))
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_a_failed_write_leaves_the_old_file(tmp_path):
    path = tmp_path / "result.json"
    write_json_atomic(path, {"status": "finished"})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"status": object()})  # not JSON
    assert json.loads(path.read_text()) == {"status": "finished"}
    assert not list(tmp_path.glob(".*.tmp"))


def test_non_finite_numbers_become_null():
    assert json_safe({"a": [math.nan, math.inf, 1.0]}) == {"a": [None, None, 1.0]}


@pytest.mark.parametrize(("content", "message"), [("{not json", "unreadable"), ("[1, 2]", "expected a JSON object"),
                                                  ('{"status": "weird"}', "no valid 'status'")])
def test_corrupt_results_are_named(tmp_path, content, message):
    (tmp_path / "result.json").write_text(content)
    with pytest.raises(CorruptRecord, match=message):
        read_result(tmp_path)


def test_no_result_is_none(tmp_path):
    assert read_result(tmp_path) is None
