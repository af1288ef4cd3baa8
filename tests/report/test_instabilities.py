"""REPORT.md's Instabilities section (ffnbench.report.instabilities): a run that did not learn is counted in a column
of its own, with its rule, and a sweep where every run learned reads as before."""

from fixtures.report.synthetic import make_record

from ffnbench.claims import Run
from ffnbench.report.instabilities import instability_section, kinds_of
from ffnbench.runs.result import RunResult


def runs_of(*records: dict) -> list[Run]:
    for rec in records:
        rec["data"]["unigram_loss"] = 3.30  # the corpus's, as a record holds it (none is computed from the corpus)
    return [Run.from_result(RunResult.from_json(rec)) for rec in records]


def test_a_run_that_did_not_learn_is_counted_in_its_own_column_with_its_rule():
    # seed 2 ends at 86.74 nats, above the uniform loss ln 256 = 5.55 (lr 3.0 on the micro model did)
    runs = runs_of(make_record("gelu", 0, 2.5), make_record("gelu", 1, 2.5), make_record("gelu", 2, 86.74))
    text = "\n".join(instability_section(runs))
    assert "1 of 3 runs had an instability" in text
    assert "no learning: a final validation loss above the uniform loss ln V, or, for a run that ended past its " \
           "warmup but before 2.5× it, within 0.45 nats of the unigram loss" in text
    assert "| variant | setting | lr | runs | diverged | plateau | spike | no_learning | which |" in text
    row = next(line for line in text.splitlines() if line.startswith("| gelu-b4-nobias "))
    assert row.endswith("| 3 |  |  |  | 1 | s2: no learning (final loss 86.74 nats at step 30) |")


def test_a_record_that_predates_the_kind_is_judged_from_its_numbers_and_a_sweep_that_learned_reads_as_before():
    old = make_record("gelu", 2, 86.74)
    old["instabilities"] = []  # recorded before no_learning existed
    (run,) = runs_of(old)
    assert kinds_of(run) == {"no_learning"}
    learned = runs_of(make_record("gelu", 0, 2.5), make_record("gelu", 1, 2.6))
    text = "\n".join(instability_section(learned))
    assert text.startswith("## Instabilities\n\n0 of 2 runs had an instability (plateau: ")
    assert "no_learning" not in text and "no learning" not in text
