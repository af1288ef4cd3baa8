"""The width-ratio figure (ffnbench.report.figures.budgets.fig_loss_vs_ratio): a line per activation, budget and
setting, each named in its legend by what sets it apart from the others."""

from fixtures.report.synthetic import make_record

from ffnbench.claims import Run
from ffnbench.report.figures import budgets


def drawn(runs, tmp_path, monkeypatch):
    kept = []
    monkeypatch.setattr(budgets, "save", lambda fig, out, name: (kept.append(fig), name)[1])
    assert budgets.fig_loss_vs_ratio(runs, tmp_path) == "loss_vs_ratio.png"
    return kept[0].axes[0]


def legend_of(runs, tmp_path, monkeypatch) -> list[str]:
    return [t.get_text() for t in drawn(runs, tmp_path, monkeypatch).get_legend().get_texts()]


def width_arm(tokens_per_param: float) -> list[Run]:
    return [Run.from_record(make_record("gelu", seed=s, loss=3.0 - 0.01 * w, width=w, non_embedding_params=2e5,
                                        config={"trainer.tokens_per_param": tokens_per_param}))
            for w in (2, 4, 8) for s in (0, 1)]


def test_series_that_differ_only_in_their_setting_are_told_apart_in_the_legend(tmp_path, monkeypatch):
    labels = legend_of(width_arm(6) + width_arm(24), tmp_path, monkeypatch)
    assert len(labels) == 2 and len(set(labels)) == 2
    assert any("6 tok/p" in label for label in labels) and any("24 tok/p" in label for label in labels)
    assert "of gelu" in drawn(width_arm(6) + width_arm(24), tmp_path, monkeypatch).get_title()  # the legend does not


def test_one_series_is_named_by_its_activation_alone(tmp_path, monkeypatch):
    assert legend_of(width_arm(6), tmp_path, monkeypatch) == ["gelu"]
