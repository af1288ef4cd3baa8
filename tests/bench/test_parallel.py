"""ffnbench.bench.parallel: one quick run's record, a run alone against two at once (skipped on one core)."""

import os

import pytest

from .checks import check_record, check_summary, positive_finite


def test_quick_parallel_times_one_run_alone_and_two_at_once(quick_run):
    data = check_record(quick_run("parallel"))
    if (os.cpu_count() or 1) < 2:
        assert data["rows"][0]["what"] == "skipped"
        return
    alone, together = data["rows"]
    assert (alone["jobs"], together["jobs"]) == (1, 2) and together["threads"] == (os.cpu_count() or 1) // 2
    for row in (alone, together):
        check_summary(row["tokens_per_s_total"], 1)
    ratio = together["tokens_per_s_ratio"]["median"]
    assert ratio == pytest.approx(together["tokens_per_s_total"]["median"] / alone["tokens_per_s_total"]["median"])
    assert positive_finite(together["runs_per_hour_ratio"]["median"])
