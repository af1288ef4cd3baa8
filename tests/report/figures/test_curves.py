"""The curves figure (ffnbench.report.figures.curves): validation loss against tokens with the seeds' min–max band
and a point at every validation, and a training-loss panel read from result.json's train_curve (or a panel saying
the records hold none)."""

import math

import pytest
from fixtures.report.synthetic import make_record

from ffnbench.claims import Run
from ffnbench.report.figures import CURVES_CAPTION, curve_bands, curves, draw_figures, fig_curves, seed_band


def test_a_seed_band_is_the_mean_lowest_and_highest_seed_where_every_seed_has_a_point():
    band = seed_band([[(0, 5.0), (100, 3.0), (200, 2.0), (300, 1.9)],
                      [(0, 5.2), (100, 3.4), (200, 2.6)],  # stopped before 300: 300 is left out
                      [(0, 5.1), (100, float("nan")), (100, 3.2), (200, 2.3)]])  # a NaN point counts for nothing
    assert band.x == [0, 100, 200] and band.seeds == 3
    assert band.mean == pytest.approx([5.1, 3.2, 2.3])
    assert (band.low, band.high) == ([5.0, 3.0, 2.0], [5.2, 3.4, 2.6])


def record(act: str, seed: int, loss: float, train: list | None) -> dict:
    rec = make_record(act, seed=seed, loss=loss)
    rec["tokens_per_step"] = 256
    if train is not None:
        rec["train_curve"] = train
    return rec


def runs_with(train_of_seed: dict[int, list | None]) -> list[Run]:
    return [Run.from_record(record(act, s, base + 0.01 * s, train))
            for act, base in (("gelu", 3.0), ("relu", 3.1)) for s, train in train_of_seed.items()]


TRAIN = {0: [[9, 5.0], [19, 4.0], [29, 3.5]], 1: [[9, 5.4], [19, 4.2], [29, 3.3]]}


def test_the_bands_hold_every_validation_and_the_training_loss_at_its_tokens():
    bands = curve_bands(runs_with(TRAIN))
    assert set(bands) == {"gelu-b4-nobias", "relu-b4-nobias"}
    val, train = bands["gelu-b4-nobias"]
    assert val.x == [0, 2560, 5120, 7680] and val.seeds == 2  # the fixture validates 4 times, 2560 tokens apart
    assert (val.low[-1], val.high[-1]) == (pytest.approx(3.0), pytest.approx(3.01))
    assert train.x == [10 * 256, 20 * 256, 30 * 256]  # step s (from 0) has trained (s + 1)·tokens_per_step tokens
    assert train.mean == pytest.approx([5.2, 4.1, 3.4]) and (train.low, train.high) == ([5.0, 4.0, 3.3],
                                                                                      [5.4, 4.2, 3.5])


def test_a_record_without_a_training_curve_gives_no_training_band():
    """Records from before train_curve was recorded (cpu-quick, cpu-claims): no training band is made up."""
    bands = curve_bands(runs_with({0: TRAIN[0], 1: None}))
    assert all(train is None for _, train in bands.values())


def drawn(runs, tmp_path, monkeypatch):
    """fig_curves' figure, kept open, and the file name it returns."""
    kept = []
    save = curves.save
    monkeypatch.setattr(curves, "save", lambda fig, out, name: (kept.append(fig), name)[1])
    name = fig_curves(runs, tmp_path)
    monkeypatch.setattr(curves, "save", save)
    return kept[0], name


def test_the_figure_draws_a_band_per_variant_a_point_at_every_validation_and_the_training_loss(tmp_path, monkeypatch):
    from matplotlib.collections import PolyCollection

    fig, name = drawn(runs_with(TRAIN), tmp_path, monkeypatch)
    whole, late, train = fig.axes
    assert name == "curves.png" and len(fig.axes) == 3
    for ax in (whole, late, train):
        assert sum(isinstance(c, PolyCollection) for c in ax.collections) == 2  # one band per variant
    for line in whole.get_lines():
        assert line.get_marker() == "." and list(line.get_xdata()) == [0, 2560, 5120, 7680]
    assert [list(line.get_xdata()) for line in train.get_lines()] == [[2560, 5120, 7680]] * 2
    assert "min–max" in whole.get_title() and "min–max" in train.get_title()
    assert not math.isnan(train.get_ylim()[0])


def test_records_without_a_training_curve_say_so_in_the_training_panel(tmp_path, monkeypatch):
    fig, _ = drawn(runs_with({0: None, 1: None}), tmp_path, monkeypatch)
    train = fig.axes[2]
    assert not train.get_lines() and "no training-loss curve" in " ".join(t.get_text() for t in train.texts)


def test_the_report_caption_states_the_band(tmp_path):
    pairs = draw_figures(runs_with(TRAIN), tmp_path)
    assert (CURVES_CAPTION, "curves.png") in pairs and "min–max" in CURVES_CAPTION
    assert (tmp_path / "curves.png").stat().st_size > 10_000
