"""ffnbench.bench.variants: one quick run's record, every variant at matched budget."""

import pytest

from .checks import check_record, check_summary


def test_quick_variants(quick_run):
    """At ffn.budget=4 and micro's d_model=32: gelu has d_ff = 4·32 = 128 and 2·32·128 params; swiglu has
    d_ff = round(2/3·128) = 85 and 3·32·85 params, a mismatch within one rounding step (3·d params)."""
    rows = {r["variant"]: r for r in check_record(quick_run("variants"))["rows"]}
    assert set(rows) == {"gelu", "swiglu"}
    target = 2 * 32 * 128
    assert (rows["gelu"]["d_ff"], rows["gelu"]["ffn_params_per_layer"]) == (128, target)
    assert (rows["swiglu"]["d_ff"], rows["swiglu"]["ffn_params_per_layer"]) == (85, 3 * 32 * 85)
    for row, matrices in ((rows["gelu"], 2), (rows["swiglu"], 3)):
        assert row["budget_mismatch"] == pytest.approx((row["ffn_params_per_layer"] - target) / target)
        assert abs(row["budget_mismatch"]) <= matrices * 32 / target  # two-sided: at most one rounding step
        check_summary(row["layer_eager_ms"], n=2)
        check_summary(row["step_eager_ms"], n=2)
    check_summary(rows["gelu"]["layer_compiled_ms"], n=2)  # compiled in --quick for gelu only
    check_summary(rows["gelu"]["step_compile_speedup"], n=2)
    assert rows["swiglu"]["layer_compiled_ms"] is None and rows["swiglu"]["step_compile_speedup"] is None
    assert rows["gelu"]["step_vs_gelu"] == 1.0
