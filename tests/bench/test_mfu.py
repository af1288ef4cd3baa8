"""ffnbench.bench.mfu: one quick run's record, its MFU against the best probe reading."""

import pytest

from ffnbench.bench import mfu

from .checks import check_record, check_summary, positive_finite


def test_quick_mfu(quick_run):
    data = check_record(quick_run("mfu"))
    peak = data["peak"]
    assert peak["peak_flops"] == max(data["rows"][0]["raw"]["probe"])  # the best probe reading
    assert [r["model"] for r in data["rows"]] == [m for m, _ in mfu.SIZES["quick"].models]
    for row in data["rows"]:
        assert positive_finite(row["flops_per_token"])
        for key in ("hand_mfu", "pipeline_mfu", "hand_tokens_per_s", "pipeline_tokens_per_s"):
            check_summary(row[key], n=mfu.SIZES["quick"].reps)
        assert row["pipeline_mfu"]["median"] == pytest.approx(
            row["pipeline_tokens_per_s"]["median"] * row["flops_per_token"] / peak["peak_flops"])
