"""Statistics over seeds: summaries with t-intervals, paired and unpaired differences, a hierarchical
bootstrap over seeds and validation windows, rates with an exact test, power, verdicts and their multiplicity
correction.

Pure functions of plain numbers. Every interval is a two-sided 95% interval (Student t, or percentile for the
bootstrap); with fewer than two values there is no interval, and none is made up: the fields are None and every
verdict is "inconclusive". The same holds when every seed gives the same value or difference: a zero spread
is no estimate of the noise, so n = 2 identical seeds must not decide anything.

Verdict rules (one family, used by every trained claim): an interval that lies strictly on one side of a
threshold decides; an interval that touches or contains it is inconclusive; no interval is inconclusive. Each
verdict carries the one-sided p-value of the decision it made (from the same distribution as its interval),
so that `multiplicity.combine` can correct a claim's parts for multiplicity (Holm, see
`multiplicity.MULTIPLICITY`).

Modules:
    intervals.py     summaries over seeds; paired (by seed), one-sample and Welch differences; t-intervals
    bootstrap.py     the hierarchical bootstrap over seeds and validation windows
    rates.py         event rates (e.g. divergence) compared with Fisher's exact test
    power.py         the minimal detectable effect, and the seeds an effect or an interval width needs
    verdicts.py      an interval against a threshold → supported, contradicted or inconclusive
    multiplicity.py  Holm's correction over a claim's parts, and their conjunction
"""
