"""C5, C6: hard zeros and dead units in the FFN's hidden activations (docs/claims.md §C5, §C6).

C5 is judged in parts, each with its own verdict, and the claim needs all of them. ReLU's half, at
initialisation (what the article's snippet measures: random weights and inputs, where ReLU zeroes half its
pre-activations by symmetry, so that part nearly always holds) and after training (what a reader takes from the
claim: whatever training made it); and GELU's none after training, in every init convention GELU was trained
under (fp32 GELU returns exact zeros where erf rounds to −1, below x ≈ −5.5, which a wider init reaches). Fractions get
intervals inside [0, 1] (stats.intervals.summarize_fraction)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ffnbench.claims.band import in_band, outside
from ffnbench.claims.claim import Evidence, Headline, Observations, min_n
from ffnbench.claims.formatting import fmt_ci, fmt_interval, fmt_mean_std
from ffnbench.claims.lr_protocol import best_lr, chosen_lrs, tuning_key
from ffnbench.claims.pairing import PairKey, matched_key, textbook_rank, without_factor
from ffnbench.claims.robust import LR_TUNING_ONLY, Robustness, cell_check, other_cells
from ffnbench.claims.runs import (
    INIT_FACTORS,
    Run,
    Setting,
    describe_setting,
    group_by,
    init_name,
    is_reference,
    per_seed_mean,
    setting_without,
    stat_of,
)
from ffnbench.stats.intervals import Summary, summarize_fraction
from ffnbench.stats.multiplicity import holm
from ffnbench.stats.verdicts import (
    CONTRADICTED,
    INCONCLUSIVE,
    ONE_SEED,
    SUPPORTED,
    Verdict,
    verdict_at_least,
    verdict_within,
)

DEAD_REPORTED = 0.4  # C6: "40%+ of ReLU units dead"
HALF_BAND = (0.4, 0.6)  # C5: "about half" — the 95% CI of ReLU's zero fraction inside this supports
HALF_OUTER = (0.3, 0.7)  # ... and wholly outside this contradicts
# C5: "no hard zeros", with a tolerance: GELU does return an exact 0 where erf rounds to −1 (x ≲ −5.5 in fp32
# and bf16: F.gelu(-8.) is -0.0), so a trained GELU may have a few; more than 1% of its hidden activations
# exactly zero is no longer "none" next to ReLU's half.
GELU_ZERO_TOL = 0.01


def relu_half(values: dict[int, float]) -> tuple[Summary, Verdict]:
    """ReLU's zero fraction, one value per seed: supported if the 95% CI lies within HALF_BAND, contradicted if
    it lies wholly outside HALF_OUTER, inconclusive otherwise (and with no runs)."""
    s = summarize_fraction(values.values())
    if not s.n:
        return s, Verdict(INCONCLUSIVE, "no finished relu run with activation statistics")
    return s, verdict_within(s, HALF_BAND, HALF_OUTER)


def gelu_none(values: dict[int, float]) -> Verdict:
    """GELU's zero fraction, one value per seed: supported if every seed's is ≤ GELU_ZERO_TOL, contradicted if
    every seed's is above it, inconclusive when the seeds disagree (and with no runs)."""
    if not values:
        return Verdict(INCONCLUSIVE, "no finished gelu run with activation statistics")
    over = sorted(s for s, v in values.items() if v > GELU_ZERO_TOL)
    worst = f"largest per-seed zero fraction {max(values.values()):.3g} (tolerance {GELU_ZERO_TOL:g})"
    if not over:
        return Verdict(SUPPORTED, f"every seed ≤ {GELU_ZERO_TOL:g}: {worst}")
    if len(over) == len(values):
        return Verdict(CONTRADICTED, f"every seed above {GELU_ZERO_TOL:g}: {worst}")
    return Verdict(INCONCLUSIVE, f"{len(over)} of {len(values)} seeds above {GELU_ZERO_TOL:g}: {worst}")


def trained_runs(runs: list[Run], act: str, tuning: Iterable[Run] = (), base: Setting | None = None
                 ) -> tuple[PairKey | None, float | None, list[Run]]:
    """The trained networks C5 reads for one activation: the textbook network (a 4× budget, no FFN bias, no
    rounding: pairing.textbook_rank) first, in `base` (the sweep's base setting, where the verdicts are decided, or
    its cell under another init) when it ran there, so that relu and gelu are read in one setting, else in the
    matched setting that differs from `base` in the fewest factors; then the most runs, then the shorter training
    (the longer one is the length check's). Never an arm of other seeds' choosing: a C7 bias arm or a C1
    width arm beside it does not take it over however many seeds it has. At the lr its tuning runs chose where it
    has some (pairing.chosen_lrs), else at that setting's best lr (the lr one would train it at); all of the
    setting's runs when it ran one lr."""
    groups = group_by((r for r in runs if r.act == act), matched_key)
    groups.pop(None, None)
    if not any(r.usable for g in groups.values() for r in g):
        return None, None, []
    key = min(groups, key=lambda k: (textbook_rank(k), _differs(k, base or ()), -sum(r.usable for r in groups[k]),
                                     dict(k.setting).get("trainer.tokens_per_param") or 0, repr(k)))
    chosen = chosen_lrs(tuning)
    tuned = {chosen[tuning_key(r)] for r in groups[key] if tuning_key(r) in chosen}
    lr = tuned.pop() if len(tuned) == 1 else best_lr(groups[key])
    return key, lr, [r for r in groups[key] if r.lr == lr]


def _differs(key: PairKey, target: Setting) -> int:
    """In how many factors (model and run: runs.MODEL_FACTORS, RUN_FACTORS) `key`'s setting differs from `target`."""
    mine, theirs = dict(key.setting), dict(target)
    return sum(mine.get(f) != v for f, v in theirs.items()) + len(set(mine) - set(theirs))


Read = Callable[[list[Run]], Verdict]  # the part's verdict from the runs of one cell at its lr


def part_robustness(obs: Observations, act: str, key: PairKey, lr: float, verdict: Verdict, read: Read,
                    inherent: tuple[str, ...] = ()) -> Robustness:
    """A part read off `act`'s runs in `key`'s setting at `lr`, read again (`read`) where one factor varies: at the
    chosen lr's neighbours (the judged neighbour runs; lacking them, the tuning runs at the grid's adjacent lrs),
    under the other init, at LONGER× the tokens, at another size, each at the lr its own tuning runs chose
    (claims.robust.cell_check decides what agrees)."""
    cells: dict[str, list[tuple]] = {}
    near = [r for r in obs.neighbours if r.act == act and matched_key(r) == key]
    if near:
        cells["lr"] = [(f"lr {x:g} (judged seeds)", read([r for r in near if r.lr == x]))
                       for x in sorted({r.lr for r in near})]
    else:
        tuning = [r for r in obs.tuning if r.act == act and matched_key(r) == key]
        grid = sorted({r.lr for r in tuning})
        if lr in grid:
            i = grid.index(lr)
            cells["lr"] = [(f"lr {x:g} ({LR_TUNING_ONLY})", read([r for r in tuning if r.lr == x]))
                           for x in grid[max(i - 1, 0):i + 2] if x != lr]
    keys = {matched_key(r) for r in obs.runs if r.act == act} - {None}
    for factor, others in other_cells(key, keys).items():
        for k in others:
            runs = [r for r in obs.runs if matched_key(r) == k]
            _, at, chosen = trained_runs(runs, act, [r for r in obs.tuning if matched_key(r) == k], k.setting)
            if chosen:
                cells.setdefault(factor, []).append((f"{describe_setting(k.setting)}, lr {at:g}", read(chosen),
                                                     in_band(k.setting)))
    return cell_check(verdict, f"{describe_setting(key.setting)}, lr {lr:g}", cells, inherent, in_band(key.setting))


def _per_seed_at_init(measured: list[Run], act: str, base: Setting, at_init: Callable[[Run], float | None]
                      ) -> dict[int, float]:
    """`act`'s value at init, one per seed, read off one network: its usable runs at any lr and length (a seed's runs
    of one network share their weights at init: the lr and the length act later). The network: the textbook FFN
    (pairing.textbook_rank: 4× budget, no bias, no rounding) first, then the fewest factors differing from the base
    setting, the length set aside (as trained_runs ranks them), then the most seeds. Never a pool of networks:
    another depth, width, init or bias is another network at init, and its run of the same seed is not the same
    sample."""
    length = "trainer.tokens_per_param"
    networks = group_by((r for r in measured if r.act == act and r.usable and at_init(r) is not None),
                        lambda r: None if (k := matched_key(r)) is None else without_factor(k, length))
    networks.pop(None, None)
    if not networks:
        return {}
    target = setting_without(base, length)
    key = min(networks, key=lambda k: (textbook_rank(k), _differs(k, target),
                                       -len(per_seed_mean(networks[k], at_init)), repr(k)))
    return per_seed_mean(networks[key], at_init)


def c5(obs: Observations) -> Evidence:
    ev = Evidence()
    at_init, after = stat_of("init", "zero_frac"), stat_of("final", "zero_frac")
    measured = [r for r in obs.runs if r.usable and at_init(r) is not None]
    if not {"relu", "gelu"} & {r.act for r in measured}:
        return ev
    base_init = init_name(obs.base_setting or ())
    init_relu, init_gelu = (_per_seed_at_init(measured, a, obs.base_setting or (), at_init) for a in ("relu", "gelu"))
    relu_key, relu_lr, relu_runs = trained_runs(list(obs.runs), "relu", obs.tuning, obs.base_setting)
    ev.where = relu_key.setting if relu_key is not None else None
    final_relu = per_seed_mean(relu_runs, after)
    init_s, init_v = relu_half(init_relu)
    final_s, final_v = relu_half(final_relu)
    # at init nothing was trained: no lr, init convention or length to check; after training, each part is read
    # again where one factor varies (part_robustness) and decides only where every factor ran and agrees
    ev.add_part("relu about half at init (the article's snippet: random weights)", init_v)
    ev.add_part("gelu no hard zeros at init", gelu_none(init_gelu))
    checks: list[tuple[str, Robustness]] = []
    if relu_key is not None:
        checked = part_robustness(obs, "relu", relu_key, relu_lr, final_v,
                                  lambda runs: relu_half(per_seed_mean(runs, after))[1])
        ev.add_part(f"relu about half after training (lr {relu_lr:g})", checked.verdict, checked.missing)
        checks.append(("relu after training", checked))
    else:
        ev.add_part("relu about half after training", final_v)
    gelu_max = []
    # the cells the parts after training read: (act, bias, setting, lr), marked in the table
    judged = {("relu", relu_key.bias, relu_key.setting, relu_lr)} if relu_key is not None else set()
    inits = sorted({init_name(r.setting) for r in obs.runs if r.act == "gelu"}, key=lambda i: (i != base_init, i))
    read = []  # (init, its setting's key, the lr, the runs) where gelu trained under that init
    for init in inits:
        runs = [r for r in obs.runs if init_name(r.setting) == init]
        tuning = [r for r in obs.tuning if init_name(r.setting) == init]
        # under another init, the base setting with only the init changed (the base's init cell), where gelu ran
        # there: not whichever arm of that init has the most seeds (a width arm at a fixed budget, say)
        key, lr, gelu_runs = trained_runs(runs, "gelu", tuning, _with_init(obs.base_setting, runs[0].setting))
        if key is not None:
            read.append((init, key, lr, gelu_runs))
    for init, key, lr, gelu_runs in read:
        values = per_seed_mean(gelu_runs, after)
        judged.add(("gelu", key.bias, key.setting, lr))
        if not in_band(key.setting):  # a sensitivity check: shown beside the parts, never one of them
            v = gelu_none(values)
            checks.append((f"gelu after training, {init} init ({outside(key.setting)}: shown, not deciding)",
                           Robustness(v, lines=[f"  - {v.verdict}: {v.reason} (lr {lr:g})"])))
            gelu_max.append(f"{init} init {max(values.values()):.3g}" if values else f"{init} init n/a")
            continue
        # one part per init, each a counterexample of its own: the init is checked by the parts themselves where
        # another init's part was read in a setting that differs from this one's in the init alone
        paired = [k for k in other_cells(key, [k for _, k, _, _ in read])["init"] if in_band(k.setting)]
        checked = part_robustness(obs, "gelu", key, lr, gelu_none(values),
                                  lambda runs: gelu_none(per_seed_mean(runs, after)),
                                  inherent=("init",) if paired else ())
        ev.add_part(f"gelu no hard zeros after training ({init} init, lr {lr:g})", checked.verdict, checked.missing)
        checks.append((f"gelu after training, {init} init", checked))
        gelu_max.append(f"{init} init {max(values.values()):.3g}" if values else f"{init} init n/a")
    ev.n = min_n(*(len(v) or None for v in (init_relu, final_relu)))
    ev.note("relu at init", init_s, signed=False)
    ev.effect = (f"relu zero fraction at init {fmt_interval(init_s, unit='', signed=False)}; after training "
                 f"{fmt_interval(final_s, unit='', signed=False)}; largest gelu zero fraction after training: "
                 f"{'; '.join(gelu_max) or 'n/a'}")
    decided = [label for label, v in ev.parts if v.verdict != INCONCLUSIVE]
    ev.details = [*_zero_table(measured, judged, obs.base_setting), "",
                  "- lr protocol: after training, each activation at " + (
                      "the lr its tuning runs chose (tuning seeds, never judged)" if obs.tuning else
                      "its best lr (lowest mean final loss), chosen on the same seeds") +
                  " — the zero fraction plays no part in the choice",
                  f"- decided parts: {'; '.join(decided) or 'none'}",
                  *(line for what, c in checks for line in (f"- {what}: {c.summary()}", *c.lines))]
    return ev


def _with_init(setting: Setting | None, other: Setting) -> Setting | None:
    """`setting` with the init of `other` (INIT_FACTORS: every Setting names them, runs.MODEL_FACTORS)."""
    init = dict(other)
    return None if setting is None else tuple((k, init[k] if k in INIT_FACTORS else v) for k, v in setting)


def _zero_table(measured: list[Run], judged: set[tuple], base: Setting | None) -> list[str]:
    """Every variant's zero fraction at init and after training, per whole setting, FFN bias and lr (runs of
    different settings or biases are different networks: never pooled); the rows C5's parts after training read
    (`judged`: (act, bias, setting, lr)) are marked."""
    lines = ["| variant | setting | lr | seeds | zero fraction at init (mean ± std) | 95% CI | after training "
             "(mean ± std) | 95% CI | dead units after training |", "|---|---|---|---|---|---|---|---|---|"]
    groups = group_by(measured, lambda r: (r.act, r.bias, r.setting, r.lr))
    for (act, bias, setting, lr) in sorted(groups, key=lambda k: (k[0], k[1], k[2] != base, str(k[2]), k[3])):
        runs = groups[(act, bias, setting, lr)]
        init, final, dead = (summarize_fraction(per_seed_mean(runs, stat_of(when, key)).values()) for when, key in
                             (("init", "zero_frac"), ("final", "zero_frac"), ("final", "dead_frac")))
        mark = " (judged)" if (act, bias, setting, lr) in judged else ""
        lines.append(f"| {act}{'+bias' if bias else ''} | {describe_setting(setting)} | {lr:g}{mark} | {init.n} | "
                     f"{fmt_mean_std(init, 3)} | {fmt_ci(init, 3)} | {fmt_mean_std(final, 3)} | {fmt_ci(final, 3)} | "
                     f"{fmt_mean_std(dead, 3)} |")
    return lines


def per_layer_dead(runs: Iterable[Run]) -> list[float] | None:
    """The dead fraction of each layer after training, averaged over the runs (None when a run lacks it)."""
    layers = []
    for r in runs:
        per = ((r.result.ffn_stats or {}).get("final") or {}).get("per_layer")
        if not per or not all(isinstance(x, dict) and x.get("dead_frac") is not None for x in per):
            return None
        layers.append([float(x["dead_frac"]) for x in per])
    if not layers or len({len(x) for x in layers}) != 1:
        return None
    return [sum(col) / len(col) for col in zip(*layers)]


def c6(obs: Observations) -> Evidence:
    """Over relu's lr grid in its deciding setting (tuning, judged and neighbour runs alike: each lr's seeds are
    independent samples of its dead fraction), each lr's dead fraction with its own interval. The lrs that count are
    the large ones: above the lr relu was tuned to (the one it would be trained at), where every seed finished
    (where some diverged, the survivors are a selected sample: shown, not judged). Supported if at some counted lr
    the dead fraction's 95% CI lies at or above 40% (Holm over the counted lrs), contradicted if at every counted lr
    it lies below, inconclusive otherwise. The part reads every lr itself; it is read again under the other init, at
    LONGER× the tokens and at another size where relu ran a grid there (claims.robust.cell_check)."""
    ev = Evidence()
    # every run of relu at each lr: tuning, judged and neighbour seeds are all independent samples of its dead fraction
    relu = [r for r in obs.with_neighbours if r.act == "relu" and matched_key(r) is not None]
    if not relu:
        return ev
    groups = group_by(relu, matched_key)
    key = min(groups, key=lambda k: (not is_reference(k.setting), k.setting != obs.base_setting,
                                     -len({r.lr for r in groups[k]}), repr(k)))
    ev.details = _sparsity_table(obs, key)
    label = "dead relu units at large lrs"
    v, ev.n, ev.effect, table, ev.headline = large_lr_dead(groups[key])
    ev.where = key.setting
    ev.details += table
    if v.verdict == INCONCLUSIVE:  # nothing to check: undecided where it ran
        ev.parts.append((label, v))
        return ev
    cells = {factor: [(describe_setting(k.setting), large_lr_dead(groups[k])[0], in_band(k.setting)) for k in others]
             for factor, others in other_cells(key, groups).items()}
    checked = cell_check(v, describe_setting(key.setting), cells, inherent=("lr",), here_in_band=in_band(key.setting))
    ev.add_part(label, checked.verdict, checked.missing)
    ev.details += ["", "- lr protocol: relu's tuned lr decides which lrs count; the dead fraction plays no part in it",
                   f"- {checked.summary()}", *checked.lines]
    return ev


def large_lr_dead(runs: list[Run]) -> tuple[Verdict, int, str, list[str], Headline | None]:
    """C6's rule over one setting's relu runs (tuning and judged): its verdict, the seeds behind it, the effect, the
    table of every lr's dead fraction, and the headline (the effect's first lr)."""
    lrs = sorted({r.lr for r in runs})
    n = len({r.seed for r in runs})
    if len(lrs) < 2:
        return Verdict(INCONCLUSIVE, "needs ≥ 2 learning rates: run `make sweep EXP=sparsity`"), n, "", [], None
    tuning = [r for r in runs if r.role == "tuning"]
    try:
        tuned = best_lr(tuning) if tuning else best_lr(runs)
    except ValueError:
        tuned = None
    dead = stat_of("final", "dead_frac")
    whole = {lr for lr in lrs if all(r.usable and dead(r) is not None for r in runs if r.lr == lr)}
    counted = [lr for lr in lrs if tuned is not None and lr > tuned and lr in whole]
    per_lr = {lr: summarize_fraction(per_seed_mean([r for r in runs if r.lr == lr], dead).values()) for lr in lrs}
    tests = holm([(f"lr {lr:g}", verdict_at_least(per_lr[lr], DEAD_REPORTED)) for lr in counted])
    table = ["", f"Dead fraction per lr (relu tuned to {'n/a' if tuned is None else f'{tuned:g}'}; counted: the "
                 f"larger lrs where every seed finished):", "",
             "| lr | seeds | dead fraction, 95% CI | per layer (mean over seeds) | counted "
             "| verdict (≥ 0.4, Holm over the counted lrs) |", "|---|---|---|---|---|---|"]
    verdict_of = dict(tests)
    for lr in lrs:
        why = ("counted" if lr in counted else "at or below the tuned lr" if tuned is not None and lr <= tuned
               else "a seed diverged" if lr not in whole else "no tuned lr")
        v = verdict_of.get(f"lr {lr:g}")
        layers = per_layer_dead(r for r in runs if r.lr == lr and r.usable)
        shown = ", ".join(f"{x:.2f}" for x in layers) if layers else "–"
        table.append(f"| {lr:g} | {per_lr[lr].n} | {fmt_interval(per_lr[lr], unit='', signed=False)} | {shown} "
                     f"| {why} | {v.verdict + ': ' + v.reason if v else '–'} |")
    if not counted:
        return (Verdict(INCONCLUSIVE, "no lr above relu's tuned lr where every seed finished: extend relu's lr grid "
                                      "upward"), n, "", table, None)
    top = counted[-1]
    if all(per_lr[lr].n < 2 for lr in counted):
        return (Verdict(INCONCLUSIVE, ONE_SEED), max(per_lr[lr].n for lr in counted),
                f"relu dead fraction at lr {top:g}: {fmt_interval(per_lr[top], unit='', signed=False)}", table,
                Headline(f"lr {top:g}", per_lr[top], signed=False))
    supported = [lr for lr in counted if verdict_of[f"lr {lr:g}"].verdict == SUPPORTED]
    # "below at every counted lr" is a conjunction: no multiplicity correction (Holm is for "at some lr")
    below = [lr for lr in counted if verdict_at_least(per_lr[lr], DEAD_REPORTED).verdict == CONTRADICTED]
    if supported:
        v = Verdict(SUPPORTED, f"at lr {', '.join(f'{x:g}' for x in supported)} the dead fraction is ≥ "
                               f"{DEAD_REPORTED:g} (95% CI, Holm over {len(counted)} lrs)")
    elif len(below) == len(counted):
        shown = ", ".join(f"{x:g}" for x in counted)
        v = Verdict(CONTRADICTED, f"below {DEAD_REPORTED:g} at every counted lr ({shown})")
    else:
        v = Verdict(INCONCLUSIVE, f"no counted lr is decided above {DEAD_REPORTED:g}, and not every one below")
    effect = "relu dead fraction: " + "; ".join(f"lr {lr:g} {fmt_interval(per_lr[lr], unit='', signed=False)}"
                                                for lr in counted)
    first = next((lr for lr in counted if per_lr[lr].has_ci), counted[0])  # the effect's first interval
    return v, per_lr[top].n, effect, table, Headline(f"lr {first:g}", per_lr[first], signed=False)


def _sparsity_table(obs: Observations, key: PairKey) -> list[str]:
    lines = [f"In {key.describe()}:", "",
             "| variant | lr | finished | diverged | dead units (mean ± std) | never positive | zero fraction |",
             "|---|---|---|---|---|---|---|"]
    runs = [r for r in obs.runs if matched_key(r) == key]
    for act in sorted({r.act for r in runs}):
        for lr in sorted({r.lr for r in runs if r.act == act}):
            at = [r for r in runs if r.act == act and r.lr == lr]
            cells = [summarize_fraction(per_seed_mean(at, stat_of("final", k)).values())
                     for k in ("dead_frac", "never_positive_frac", "zero_frac")]
            lines.append(f"| {act} | {lr:g} | {sum(r.status == 'finished' for r in at)} | "
                         f"{sum(r.status == 'diverged' for r in at)} | " + " | ".join(fmt_mean_std(c, 3) for c in cells)
                         + " |")
    return lines
