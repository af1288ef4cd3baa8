"""ffnbench.stats.multiplicity: a claim's parts as a conjunction, after Holm's correction."""

from ffnbench.stats.multiplicity import MULTIPLICITY, combine, holm
from ffnbench.stats.verdicts import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Verdict


def test_combine_is_a_conjunction():
    yes, no, maybe = (Verdict(v, v) for v in (SUPPORTED, CONTRADICTED, INCONCLUSIVE))
    assert combine([("a", yes), ("b", yes)]).verdict == SUPPORTED
    assert combine([("a", yes), ("b", maybe)]).verdict == INCONCLUSIVE
    mixed = combine([("a", yes), ("b", no), ("c", maybe)])
    assert mixed.verdict == CONTRADICTED and mixed.reason.startswith("b:")
    assert combine([]).verdict == INCONCLUSIVE


def part(verdict: str, p: float | None) -> Verdict:
    return Verdict(verdict, f"{verdict} alone", p)


def test_holm_two_parts_each_just_significant_alone_are_not_both_decisive():
    parts = [("a", part(SUPPORTED, 0.02)), ("b", part(CONTRADICTED, 0.02))]  # 2p = 0.04 > 0.05 / 2
    combined = combine(parts)
    assert combined.verdict == INCONCLUSIVE  # without the correction: contradicted
    assert combined.reason.startswith("a: supported alone, but not significant after Holm over 2 parts "
                                      "(p = 0.04, needs ≤ 0.025); b: contradicted alone, but not significant")
    assert [v.verdict for _, v in holm(parts)] == [INCONCLUSIVE, INCONCLUSIVE]


def test_holm_steps_down():
    strong = [("a", part(SUPPORTED, 0.001)), ("b", part(CONTRADICTED, 0.02))]  # 0.002 ≤ 0.025, then 0.04 ≤ 0.05
    assert [v.verdict for _, v in holm(strong)] == [SUPPORTED, CONTRADICTED]
    assert combine(strong).verdict == CONTRADICTED
    # sorted 2p = 0.02, 0.024, 0.024 against 0.0167, 0.025, 0.05: the first fails, and Holm stops there
    three = [("a", part(SUPPORTED, 0.012)), ("b", part(SUPPORTED, 0.01)), ("c", part(SUPPORTED, 0.012))]
    held = holm(three)
    assert [v.verdict for _, v in held] == [INCONCLUSIVE] * 3
    assert held[0][1].reason.endswith("(p = 0.024, Holm stopped at a part with p = 0.02 > 0.017)")
    # an inconclusive part counts in the family (it was tested) and stays inconclusive
    mixed = [("a", part(SUPPORTED, 0.01)), ("b", part(INCONCLUSIVE, 0.3))]  # 0.02 ≤ 0.025
    assert [v.verdict for _, v in holm(mixed)] == [SUPPORTED, INCONCLUSIVE]
    assert holm([("a", part(SUPPORTED, 0.02)), ("b", part(INCONCLUSIVE, 0.3))])[0][1].verdict == INCONCLUSIVE


def test_holm_leaves_single_and_exact_parts_alone():
    single = [("a", part(CONTRADICTED, 0.02))]
    assert holm(single) == single and combine(single).verdict == CONTRADICTED
    exact = [("a", part(CONTRADICTED, None)), ("b", part(SUPPORTED, None)), ("c", part(SUPPORTED, 0.02))]
    assert holm(exact) == exact and combine(exact).verdict == CONTRADICTED
    assert MULTIPLICITY == "Holm over a claim's parts, family α = 0.05"


def test_an_undecided_parts_would_be_reading_is_held_to_holm_too():
    """C13's "linear worse than gelu" is lr-dependent, its reading where it ran supported at p = 0.03 (2p = 0.06):
    over two parts that reading does not survive Holm, and the part says so."""
    parts = [("a", Verdict(INCONCLUSIVE, "lr-dependent (would be supported: CI above 0)", 0.015)),
             ("b", Verdict(INCONCLUSIVE, "CI contains 0", 0.3))]
    out = dict(holm(parts))
    assert "not significant after Holm over 2 parts either (p = 0.03" in out["a"].reason
    assert out["b"].reason == "CI contains 0"
    assert dict(holm(parts[:1]))["a"].reason == parts[0][1].reason  # one part: nothing to correct
