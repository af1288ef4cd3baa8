"""The Learning-rate grids section, LR sensitivity, the shared-lr differences and the loss-vs-lr figures, on
synthetic tuning grids whose answers are worked out by hand."""

import math

import pytest
from fixtures.report.synthetic import make_record, write_sweep

from ffnbench import report
from ffnbench.claims import Run, describe_setting
from ffnbench.claims.pairing import shared_lr_differences
from ffnbench.report.figures import LR_CURVES_CAPTION, draw_figures
from ffnbench.report.lrgrid import (
    families,
    initial_loss,
    lr_sensitivity,
    lrgrid_section,
    variant_pairs,
)

SEEDS = (100, 101, 102)
# {act: {lr: loss per seed (None: diverged)}}; every record's initial validation loss is 5.5 (make_record)
GRID = {
    "relu": {1e-3: (3.20, 3.22, 3.21), 0.00141: (3.10, 3.12, 3.11), 2e-3: (3.15, None, 3.17)},
    "gelu": {1e-3: (3.00, 3.03, 3.01), 0.00141: (3.05, 3.08, 3.06), 2e-3: (None, None, 3.30)},
    "swish": {1e-3: (3.05, 3.06, 3.07), 0.00141: (3.04, 3.05, 3.06)},  # never ran at 2e-3
}


def tuning(act, seed, lr, loss, n_layer=2):
    return make_record(act, seed, loss, lr=lr, n_layer=n_layer, config={"tuning": True},
                       status="finished" if loss is not None else "diverged")


def grid_records():
    records = [tuning(act, s, lr, loss) for act, grid in GRID.items() for lr, losses in grid.items()
               for s, loss in zip(SEEDS, losses)]
    # a second family, 4 layers, tuned at one lr only: a table, no figure
    records += [tuning(act, s, 1e-3, 3.0 + 0.01 * i + 0.001 * s, n_layer=4) for i, act in enumerate(("relu", "gelu"))
                for s in SEEDS[:2]]
    return records


@pytest.fixture(scope="module")
def runs():
    return [Run.from_record(r) for r in grid_records()]


def variant(runs, act, n_layer=2):
    return [r for r in runs if r.act == act and r.factor("model.n_layer") == n_layer]


def section_of(runs):
    return "\n".join(lrgrid_section(runs))


def test_families_group_tuning_runs_by_setting_then_variant(runs):
    fams = families([*runs, Run.from_record(make_record("relu", 0, 3.0, lr=1e-3))])  # a judged run: in none
    assert [dict(s)["model.n_layer"] for s, _ in fams] == [2, 4]
    assert list(fams[0][1]) == ["relu-b4-nobias", "gelu-b4-nobias", "swish-b4-nobias"]
    assert sum(len(rs) for _, v in fams for rs in v.values()) == len(runs)


def test_grid_table_shows_medians_the_chosen_lr_in_bold_walls_and_lrs_not_run(runs):
    text = section_of(runs)
    assert text.startswith("## Learning-rate grids")
    family = text.split("### ")[1]
    assert ("| variant | lr 0.001 | lr 0.00141 | lr 0.002 | lr sensitivity (nats; the shared lrs 0.001–0.00141, 2 "
            "lrs) | optimum bracketed |") in family
    # relu: medians 3.21, 3.11, 3.17 (3.15, 3.17, ∞); chosen 0.00141, inside its grid; its sensitivity over the
    # lrs swish also ran (0.001, 0.00141): excess 0.10, 0
    assert "| relu-b4-nobias | 3.210 | **3.110** | 3.170 | 0.050 | yes |" in family
    # gelu: two of three seeds diverged at 0.002 → ∞ (not a shared lr); chosen 0.001, at the lower edge
    assert "| gelu-b4-nobias | **3.010** | 3.060 | ∞ | 0.025 | no (at the lower edge of 3 lrs) |" in family
    assert "| swish-b4-nobias | 3.060 | **3.050** | – | 0.005 | no (at the upper edge of 2 lrs) |" in family
    assert "Loss against lr: `figures/lr_curves_1.png`" in family
    one_lr = text.split("### ")[2]
    assert one_lr.startswith(describe_setting(variant(runs, "relu", 4)[0].setting))
    assert "figures/" not in one_lr  # one lr: no figure
    assert "| relu-b4-nobias | **3.101** | n/a (one lr) |" in one_lr  # no variation to be sensitive to


def test_lr_sensitivity_by_hand(runs):
    # relu: capped medians 3.21, 3.11, 3.17 (the diverged seed at its initial loss 5.5): excess 0.10, 0, 0.06
    assert lr_sensitivity(variant(runs, "relu")) == pytest.approx((0.10 + 0.0 + 0.06) / 3)
    # gelu: 3.01, 3.06 and, at the wall, median(5.5, 5.5, 3.30) = 5.5: excess 0, 0.05, 2.49
    assert lr_sensitivity(variant(runs, "gelu")) == pytest.approx((0.0 + 0.05 + 2.49) / 3)
    assert lr_sensitivity(variant(runs, "swish")) == pytest.approx(0.01 / 2)
    assert lr_sensitivity(variant(runs, "gelu"), [1e-3, 0.00141]) == pytest.approx(0.05 / 2)  # the shared lrs only
    walled = [Run.from_record(tuning("relu", s, lr, None)) for s in SEEDS[:2] for lr in (1e-3, 2e-3)]
    assert lr_sensitivity(walled) is None  # no finite median anywhere: nothing to deviate from


def test_a_loss_above_the_initial_loss_is_capped_and_a_missing_initial_loss_is_ln_vocab():
    high = [Run.from_record(tuning("relu", s, lr, loss)) for s in SEEDS[:2] for lr, loss in ((1e-3, 3.0), (2e-3, 9.0))]
    assert lr_sensitivity(high) == pytest.approx((5.5 - 3.0) / 2)  # 9.0 counts as the initial 5.5
    rec = tuning("relu", 100, 2e-3, None)
    del rec["metrics"]["init_val_loss"]
    assert initial_loss(Run.from_record(rec)) == pytest.approx(math.log(256))


def test_shared_lr_differences_pair_the_seeds_both_finished(runs):
    relu, gelu, swish = (variant(runs, a) for a in ("relu", "gelu", "swish"))
    diffs = shared_lr_differences(relu, gelu)
    assert list(diffs) == [1e-3, 0.00141, 2e-3]
    assert diffs[1e-3].mean == pytest.approx((-0.20 - 0.19 - 0.20) / 3) and diffs[1e-3].n == 3
    assert diffs[1e-3].has_ci and diffs[1e-3].ci_low < diffs[1e-3].mean < diffs[1e-3].ci_high
    assert diffs[0.00141].mean == pytest.approx((-0.05 - 0.04 - 0.05) / 3)
    # at 0.002 only seed 102 finished on both sides: one pair, no interval
    assert diffs[2e-3].n == 1 and diffs[2e-3].mean == pytest.approx(3.30 - 3.17) and not diffs[2e-3].has_ci
    assert list(shared_lr_differences(relu, swish)) == [1e-3, 0.00141]  # swish never ran at 0.002
    judged = [Run.from_record(make_record("gelu", s, 2.0, lr=1e-3)) for s in SEEDS]  # not tuning runs: ignored
    assert shared_lr_differences(relu, [*gelu, *judged])[1e-3].mean == pytest.approx(diffs[1e-3].mean)


def test_differences_table_has_every_pair_up_to_four_variants(runs):
    assert variant_pairs(["a", "b", "c"]) == [("a", "b"), ("a", "c"), ("b", "c")]
    assert variant_pairs(list("abcde")) == [("a", x) for x in "bcde"]
    family = section_of(runs).split("### ")[1]
    rows = [line for line in family.splitlines() if " − " in line and line.startswith("| ")]
    assert [row.split(" | ")[0] for row in rows] == ["| gelu-b4-nobias − relu-b4-nobias",
                                                     "| swish-b4-nobias − relu-b4-nobias",
                                                     "| swish-b4-nobias − gelu-b4-nobias"]
    cells = rows[0].split(" | ")
    assert cells[1].startswith("-0.1967 [") and cells[1].endswith("(n=3)")
    assert cells[3] == "+0.1300 (1 seed: no interval) |"
    assert rows[1].endswith(" | – |")  # swish has no 0.002 run


def test_no_tuning_runs_no_section():
    assert lrgrid_section([Run.from_record(make_record("relu", s, 3.0)) for s in (0, 1)]) == []


def test_a_figure_per_family_with_two_lrs_or_more(runs, tmp_path):
    out = tmp_path / "figures"
    drawn = draw_figures(runs, out)
    curves = [(caption, name) for caption, name in drawn if name.startswith("lr_curves")]
    setting = variant(runs, "relu")[0].setting
    assert curves == [(f"{LR_CURVES_CAPTION}: {describe_setting(setting)}", "lr_curves_1.png")]
    assert (out / "lr_curves_1.png").stat().st_size > 1000
    assert not (out / "lr_curves_2.png").exists()  # the 4-layer family has one lr


def test_report_has_the_section_and_links_the_figure(tmp_path):
    judged = [make_record(act, s, 3.0 + 0.001 * s, lr=lr) for s in (0, 1) for act, lr in (("relu", 0.00141),
                                                                                          ("gelu", 1e-3))]
    text = report.write_report(write_sweep(tmp_path / "s", grid_records() + judged), bench_files=[]).read_text()
    assert text.index("## Instabilities") < text.index("## Learning-rate grids") < text.index("## Results by")
    assert "](figures/lr_curves_1.png)" in text and (tmp_path / "s" / "figures" / "lr_curves_1.png").exists()
