"""The Claims table's row per claim: the headline interval and its name from the claim's evidence (not its text),
the labels ranked and filtered, the name dropped from a row too long to read at a glance."""

from ffnbench.claims.claim import ClaimResult, Evidence, Headline
from ffnbench.claims.registry import CLAIMS
from ffnbench.report.rows import MAX_ROW, summary_row
from ffnbench.stats.intervals import Paired, Summary
from ffnbench.stats.verdicts import INCONCLUSIVE, SUPPORTED, Verdict

C4 = next(c for c in CLAIMS if c.id == "C4")


def _result(verdict: Verdict, headline: Headline | None, labels=(), effect="some effect text"):
    return ClaimResult(C4, verdict, effect, 6, [], headline=headline, labels=tuple(labels))


def _diff(mean, low, high) -> Paired:
    return Paired(6, mean, 0.01, low, high, 0.01)


def test_the_row_shows_the_headline_interval_signed_with_its_name():
    row = summary_row(_result(Verdict(SUPPORTED, "its interval lies above 0"),
                              Headline("loss(relu) − loss(gelu)", _diff(0.07094, 0.02718, 0.098)), ["lr-robust"]))
    assert row[:3] == ["C4", "**supported**", "loss(relu) − loss(gelu) +0.0709 [+0.0272, +0.0980]"]
    assert row[4] == "lr-robust" and row[5] == "6"


def test_a_fraction_is_unsigned_and_a_headline_without_an_interval_shows_the_effect_text():
    fraction = _result(Verdict(SUPPORTED, "x"), Headline("relu at init", Summary(6, 0.496, 0.01, 0.486, 0.506),
                                                         signed=False))
    assert summary_row(fraction)[2] == "relu at init 0.4960 [0.4860, 0.5060]"
    one_seed = _result(Verdict(INCONCLUSIVE, "x"), Headline("d", Paired(1, 0.1, None, None, None, None)),
                       effect="loss(a) − loss(b) = +0.1000 nats, 95% CI n/a (1 seed)")
    assert summary_row(one_seed)[2] == "loss(a) − loss(b) = +0.1000 nats, 95% CI n/a (1 seed)"
    assert summary_row(_result(Verdict(INCONCLUSIVE, "x"), None, effect="w" * 30 + " " + "z" * 40))[2] == \
        "w" * 30 + " …"


def test_labels_the_verdict_names_are_left_out_and_those_that_change_its_reading_come_first():
    labels = ["lr-robust", "reduced grid", "reverses at init std 0.16, outside practice",
              "inconclusive at 4× the tokens, outside practice", "init, length unchecked", "lr-sensitive"]
    row = summary_row(_result(Verdict(INCONCLUSIVE, "inconclusive (init, length unchecked): no runs vary ..."),
                              Headline("d", _diff(0.01, -0.01, 0.03)), labels))
    assert row[1] == "**inconclusive** (init, length unchecked)"
    assert row[4] == "reverses at init std 0.16, outside practice; lr-sensitive"  # one outside-practice label
    named = summary_row(_result(Verdict(INCONCLUSIVE, "inconclusive (lr-dependent): the differences at other lrs"),
                                Headline("d", _diff(0.01, -0.01, 0.03)), ["lr-dependent", "reduced grid"]))
    assert named[4] == "reduced grid"  # the verdict column already says lr-dependent
    assert summary_row(_result(Verdict(SUPPORTED, "x"), Headline("d", _diff(0.1, 0.05, 0.2)), ["lr-robust"]))[4] \
        == "lr-robust"
    assert summary_row(_result(Verdict(SUPPORTED, "x"), Headline("d", _diff(0.1, 0.05, 0.2))))[4] == "–"


def test_a_long_row_drops_the_headline_name_and_a_long_name_is_never_shown():
    long_labels = ["reverses at init std 0.16, outside practice", "lr-dependent because " + "x" * 60]
    row = summary_row(_result(Verdict(SUPPORTED, "x"), Headline("loss(relu) − loss(gelu)", _diff(0.1, 0.05, 0.2)),
                              long_labels))
    assert row[2] == "+0.1000 [+0.0500, +0.2000]"
    assert len(" | ".join(row)) > MAX_ROW - len("loss(relu) − loss(gelu) ")
    named = _result(Verdict(SUPPORTED, "x"), Headline("gelu: bpb(no bias) − bpb(bias)", _diff(0.1, 0.05, 0.2)))
    assert summary_row(named)[2] == "+0.1000 [+0.0500, +0.2000]"  # over 25 characters: the section names it


def test_evidence_keeps_the_first_headline_and_each_label_once():
    ev = Evidence()
    ev.note("2 layers", _diff(0.12, 0.04, 0.17), ["lr-robust", "init unchecked"])
    ev.note("4 layers", _diff(0.05, 0.01, 0.08), ["lr-sensitive", "init unchecked"])
    other = Evidence()
    other.note("x", _diff(0.2, 0.1, 0.3), ["length-robust"])
    ev.merge(other)
    assert ev.headline.name == "2 layers"
    assert ev.labels == ["lr-robust", "init unchecked", "lr-sensitive", "length-robust"]
    empty = Evidence()
    empty.merge(other)
    assert empty.headline.name == "x" and empty.labels == ["length-robust"]


def test_a_headline_without_an_interval_gives_way_to_the_next_one_with_an_interval():
    ev = Evidence()
    ev.note("2 layers", Paired(1, 0.1, None, None, None, None), ["lr-robust"])
    ev.note("4 layers", _diff(0.05, 0.01, 0.08))
    ev.note("depth interaction", _diff(0.01, -0.03, 0.04))
    assert ev.headline.name == "4 layers"
    merged = Evidence()
    merged.note("x", Paired(1, 0.1, None, None, None, None))
    merged.merge(ev)
    assert merged.headline.name == "4 layers"

