"""The claims of DESIGN §8: what each one says, where it comes from, which runs test it, and the rule that
turns their numbers into a verdict — supported, contradicted or inconclusive.

The metric of every trained claim is the final validation loss in nats/token (bits per byte alongside).
Comparisons are paired by seed: the same seed gives every FFN the same data order and the same non-FFN
initialisation, so a per-seed difference cancels the seed's luck. Every rule is stated in `Claim.rule`, and
the report prints it next to the verdict.

Uniform rules (ffnbench.stats): an interval strictly on one side of the threshold decides, otherwise the
verdict is inconclusive; a claim made of parts is their conjunction (stats.combine); a trained claim whose
deciding comparison has fewer than two seeds is at most inconclusive ("one seed: no interval"); a trained
claim with no runs in the sweep is inconclusive with the command that makes them.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ffnbench import stats
from ffnbench.accounting import ParamBreakdown, bytes_of, count_params, ffn_forward_flops
from ffnbench.ffn import FeedForward, FFNSpec, size_ffn
from ffnbench.params import DOC_SEQ_LEN, reference_models
from ffnbench.stats import CONTRADICTED, INCONCLUSIVE, SUPPORTED, Paired, Summary, Verdict

REPO = Path(__file__).resolve().parent.parent
BENCH_GLOB = "experiments/bench/*/alignment.json"
DEFAULT_MAX_MISMATCH = 0.02  # train.yaml's ffn.max_mismatch, for records that lack it
MODEL_FACTORS = ("name", "d_model", "n_layer", "n_head", "seq_len", "non_embedding_params")
BIAS_MARGIN = 0.01  # nats: a loss cost smaller than this is "can be dropped" (C7)
DEAD_REPORTED = 0.4  # C6: "40%+ of ReLU units dead"
ALIGNMENTS = (64, 128, 256)  # C9


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


# ---- runs -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)  # a run is itself: compared and hashed by identity
class Run:
    """What the claims and the report need from one result record (finished or diverged)."""

    name: str
    status: str
    seed: int
    act: str  # the variant; "gelu-tanh"/"geglu-tanh" for the tanh approximation, which no claim is about
    gated: bool
    sizing: str  # width | budget
    ratio: float
    bias: bool
    multiple_of: int
    label: str  # FFNSpec.label
    d_model: int  # as built (solved per FFN under a fixed non-embedding budget)
    d_ff: int
    ffn_params: int  # per layer
    ffn_total: int
    total_params: int
    budget_mismatch: float
    max_mismatch: float
    lr: float
    setting: tuple  # the studied model factors as configured: (("model.name", "small"), ...)
    loss: float | None  # final validation loss, nats/token
    bpb: float | None
    init: dict | None  # ffn_stats.init.mean: zero_frac, dead_frac, never_positive_frac
    final: dict | None
    tokens_per_s: float | None
    mfu: float | None
    curve: tuple  # ((tokens, val_loss), ...), finite points only
    error: str | None
    record: dict = field(repr=False)

    @classmethod
    def from_record(cls, rec: dict) -> Run:
        """KeyError/TypeError/ValueError when a field the analysis needs is missing or malformed."""
        ffn, cfg, metrics = rec["ffn"], rec["config"], rec.get("metrics") or {}
        stats_ = rec.get("ffn_stats") or {}
        thr = rec.get("throughput") or {}
        act = ffn["act"] + ("-tanh" if ffn.get("approximate") == "tanh" else "")
        loss = metrics.get("final_val_loss")
        return cls(
            name=str(rec.get("run_name") or Path(str(rec.get("run_dir", "?"))).name),
            status=rec["status"],
            seed=int(rec["seed"]),
            act=act,
            gated=bool(ffn["gated"]),
            sizing=ffn["sizing"],
            ratio=float(ffn["ratio"]),
            bias=bool(ffn["bias"]),
            multiple_of=int(ffn.get("multiple_of", 1)),
            label=ffn["label"],
            d_model=int(rec["model"]["d_model"]),
            d_ff=int(ffn["d_ff"]),
            ffn_params=int(ffn["params_per_layer"]),
            ffn_total=int(rec["params"]["ffn_total"]),
            total_params=int(rec["params"]["total"]),
            budget_mismatch=float(ffn.get("budget_mismatch") or 0.0),
            max_mismatch=float(cfg.get("ffn", {}).get("max_mismatch", DEFAULT_MAX_MISMATCH)),
            lr=float(cfg["optim"]["lr"]),
            setting=tuple((f"model.{k}", cfg["model"].get(k)) for k in MODEL_FACTORS),
            loss=float(loss) if _finite(loss) else None,
            bpb=float(metrics["final_val_bpb"]) if _finite(metrics.get("final_val_bpb")) else None,
            init=((stats_.get("init") or {}).get("mean")),
            final=((stats_.get("final") or {}).get("mean")),
            tokens_per_s=thr.get("tokens_per_s") if _finite(thr.get("tokens_per_s")) else None,
            mfu=thr.get("mfu") if _finite(thr.get("mfu")) else None,
            curve=tuple((p["tokens"], p["val_loss"]) for p in rec.get("curve") or [] if _finite(p.get("val_loss"))),
            error=rec.get("error"),
            record=rec,
        )

    @property
    def usable(self) -> bool:
        """Counts in the loss statistics: finished, with a finite final validation loss."""
        return self.status == "finished" and self.loss is not None

    @property
    def budget_ratio(self) -> float | None:
        """The ungated ratio whose parameter count this FFN has. An ungated FFN sized by budget r is the same
        model as one sized by width r; a gated FFN sized by width matches no budget."""
        return self.ratio if (self.sizing == "budget" or not self.gated) else None

    def factor(self, key: str) -> Any:
        return dict(self.setting)[key]


def setting_without(setting: tuple, key: str) -> tuple:
    return tuple((k, v) for k, v in setting if k != key)


def describe_setting(setting: tuple) -> str:
    s = dict(setting)
    text = f"{s.get('model.name') or 'model'} (d_model {s.get('model.d_model')}, {s.get('model.n_layer')} layers)"
    if s.get("model.non_embedding_params"):
        text = (f"{s.get('model.name') or 'model'} at a fixed {s['model.non_embedding_params']:.3g} non-embedding "
                f"params ({s.get('model.n_layer')} layers; d_model solved per FFN)")
    return text


def describe_key(key: tuple) -> str:
    """A comparison key is (setting, (name, value), ...): what was held fixed, in words."""
    words = [describe_setting(key[0])]
    for name, value in key[1:]:
        if name == "budget":
            words.append(f"budget {value:g}× (params of a {value:g}·d ungated FFN)")
        elif name == "bias":
            words.append("FFN bias" if value else "no FFN bias")
        elif name == "multiple_of":
            words += [f"d_ff multiple of {value}"] if value != 1 else []
        else:
            words.append(f"{name} {value}")
    return ", ".join(words)


def by_seed(runs: Iterable[Run], value: Callable[[Run], float | None] = lambda r: r.loss) -> dict[int, float]:
    """{seed: value} over the usable runs. Width-sized runs come first, so where an ungated width-r and
    budget-r run (the same model) share a seed, the width run is the one used."""
    out: dict[int, float] = {}
    for r in sorted(runs, key=lambda r: (r.sizing != "width", r.name)):
        v = value(r)
        if r.usable and v is not None and r.seed not in out:
            out[r.seed] = v
    return out


def summary_of(runs: Iterable[Run], value: Callable[[Run], float | None] = lambda r: r.loss) -> Summary:
    return stats.summarize(by_seed(runs, value).values())


def matched_key(r: Run) -> tuple | None:
    """Everything but the variant and the lr held fixed, at a matched parameter budget."""
    if r.budget_ratio is None:
        return None
    return (r.setting, ("budget", r.budget_ratio), ("bias", r.bias), ("multiple_of", r.multiple_of))


def act_is(name: str) -> Callable[[Run], bool]:
    return lambda r: r.act == name


# ---- comparisons ------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Comparison:
    """b − a between two sets of runs that differ only in the factor under test (paired by seed)."""

    a: str
    b: str
    key: tuple
    lr: str  # "lr 0.001" or "each at its best lr (...)"
    best_lr: bool
    a_runs: tuple[Run, ...]
    b_runs: tuple[Run, ...]

    @cached_property
    def diff(self) -> Paired:
        return stats.compare(by_seed(self.a_runs), by_seed(self.b_runs))

    @property
    def where(self) -> str:
        return f"{describe_key(self.key)}, {self.lr}"

    @cached_property
    def seed_diffs(self) -> dict[int, float]:
        """b − a per seed that both sides ran."""
        a, b = by_seed(self.a_runs), by_seed(self.b_runs)
        return {s: b[s] - a[s] for s in set(a) & set(b)}

    def verdict(self, rule: Callable[[Paired], Verdict] = stats.verdict_better) -> Verdict:
        """`rule` applied to b − a, once the budgets are known to be matched (inconclusive otherwise)."""
        problem = self.budget_problem()
        return Verdict(INCONCLUSIVE, problem) if problem else rule(self.diff)

    def budget_problem(self) -> str | None:
        """A matched comparison is only as good as its match (DESIGN §3)."""
        for r in (*self.a_runs, *self.b_runs):
            if r.sizing == "budget" and abs(r.budget_mismatch) > r.max_mismatch:
                return (f"budget not matched: {r.label} (d_ff {r.d_ff}) misses its budget by "
                        f"{r.budget_mismatch:+.2%}, beyond ffn.max_mismatch={r.max_mismatch:g}")
        return None


def group_by(runs: Iterable[Run], key: Callable[[Run], Any]) -> dict[Any, list[Run]]:
    """The runs by key(run), keys in order of first appearance."""
    out: dict[Any, list[Run]] = defaultdict(list)
    for r in runs:
        out[key(r)].append(r)
    return out


def best_lr(runs: list[Run]) -> float:
    """The lr with the lowest mean final loss (chosen on the loss it is then compared on: a mild optimism
    that both sides of a comparison share)."""
    means = {lr: summary_of([r for r in runs if r.lr == lr]).mean for lr in {r.lr for r in runs if r.usable}}
    return min(means, key=lambda lr: (means[lr], lr))


def compare_sides(runs: Iterable[Run], a: Callable[[Run], bool], b: Callable[[Run], bool],
                  key: Callable[[Run], Hashable | None], names: tuple[str, str]) -> list[Comparison]:
    """One comparison per setting (key) and lr where both sides have usable runs; and where both sides ran at
    two or more lrs, one more with each side at its own best lr, so that neither is judged at an lr that
    happens to suit the other."""
    groups = group_by((r for r in runs if a(r) or b(r)), key)
    groups.pop(None, None)  # runs outside every setting of this comparison
    out = []
    for k, group in groups.items():
        side_a, side_b = [r for r in group if a(r)], [r for r in group if b(r)]
        lrs_a, lrs_b = {r.lr for r in side_a if r.usable}, {r.lr for r in side_b if r.usable}
        for lr in sorted(lrs_a & lrs_b):
            out.append(Comparison(*names, k, f"lr {lr:g}", False, tuple(r for r in side_a if r.lr == lr),
                                  tuple(r for r in side_b if r.lr == lr)))
        if len(lrs_a) >= 2 and len(lrs_b) >= 2:
            la, lb = best_lr(side_a), best_lr(side_b)
            out.append(Comparison(*names, k, f"each at its best lr ({names[0]} {la:g}, {names[1]} {lb:g})", True,
                                  tuple(r for r in side_a if r.lr == la), tuple(r for r in side_b if r.lr == lb)))
    return out


def primary(comps: list[Comparison], base: tuple | None) -> Comparison | None:
    """The comparison that decides a verdict: the most paired seeds; then each side at its best lr; then the
    sweep's most common setting. The others are shown beside it."""
    if not comps:
        return None
    return min(comps, key=lambda c: (-c.diff.n, not c.best_lr, c.key[0] != base, _textbook_rank(c.key), str(c.key),
                                     c.lr))


def _textbook_rank(key: tuple) -> tuple:
    """Among otherwise equal candidates, the textbook setting: a 4× budget, no FFN bias, no rounding."""
    factors = dict(key[1:])
    return (factors.get("budget", 4) != 4, bool(factors.get("bias")), factors.get("multiple_of", 1) != 1)


# ---- formatting -------------------------------------------------------------------------------------------


def na(n: int) -> str:
    return "n/a (no finished run)" if n == 0 else "n/a (1 seed)"


def fmt_p(p: float | None) -> str:
    return "–" if p is None else ("< 1e-4" if p < 1e-4 else f"{p:.2g}")


def fmt_interval(x: Paired | Summary, unit: str = "nats", digits: int = 4, signed: bool = True) -> str:
    """'+0.0123 nats, 95% CI [+0.0040, +0.0206], p = 0.012' — or why there is no interval."""
    if x.n == 0 or x.mean is None:
        return na(0)
    sign = "+" if signed else ""
    text = f"{x.mean:{sign}.{digits}f} {unit}".rstrip() + f", 95% CI {fmt_ci(x, digits, signed)}"
    if not x.has_ci:
        return text
    if isinstance(x, Paired) and x.p_value is not None:
        text += f", p {'' if x.p_value < 1e-4 else '= '}{fmt_p(x.p_value)}"
        text += " (Welch, unpaired)" if x.method == "welch" else ""
    return text


def fmt_mean_std(s: Summary, digits: int = 4) -> str:
    if s.n == 0:
        return "–"
    return f"{s.mean:.{digits}f} ± {s.std:.{digits}f}" if s.std is not None else f"{s.mean:.{digits}f} ± n/a"


def fmt_ci(s: Summary | Paired, digits: int = 4, signed: bool = False) -> str:
    sign = "+" if signed else ""
    return f"[{s.ci_low:{sign}.{digits}f}, {s.ci_high:{sign}.{digits}f}]" if s.has_ci else na(s.n)


def comparison_line(c: Comparison, what: str, deciding: bool = False) -> str:
    mark = " ← decides the verdict" if deciding else ""
    return f"- {what}, {c.where}: {fmt_interval(c.diff)} (n = {c.diff.n}){mark}"


# ---- claims -----------------------------------------------------------------------------------------------


@dataclass
class Evidence:
    """What a claim's rule found: its parts (a conjunction), the headline effect, the seeds behind it
    (None: no runs of this claim in the sweep) and the numbers behind it (markdown lines)."""

    parts: list[tuple[str, Verdict]] = field(default_factory=list)
    effect: str = ""
    n: int | None = None
    details: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Context:
    runs: tuple[Run, ...]  # finished and diverged runs; the loss statistics use the finished ones
    bench_files: tuple[Path, ...] = ()

    @cached_property
    def base_setting(self) -> tuple | None:
        counts = Counter(r.setting for r in self.runs if r.usable)
        return min(counts, key=lambda s: (-counts[s], str(s))) if counts else None


@dataclass(frozen=True)
class Claim:
    id: str
    statement: str
    source: str
    kind: str  # analytic | trained | benchmark
    experiment: str | None  # the sweep that tests it
    needs: str  # which runs
    rule: str
    why: str
    evaluate: Callable[[Context], Evidence] = field(repr=False)

    @property
    def command(self) -> str:
        if self.kind == "analytic":
            return "python -m ffnbench params"
        if self.kind == "benchmark":
            return "make bench"
        return f"make sweep EXP={self.experiment}"


@dataclass(frozen=True)
class ClaimResult:
    claim: Claim
    verdict: Verdict
    effect: str
    n: int | None
    details: list[str]


def evaluate_claim(claim: Claim, ctx: Context) -> ClaimResult:
    ev = claim.evaluate(ctx)
    if claim.kind == "trained" and ev.n is None:
        reason = f"not in this sweep: run `make sweep EXP={claim.experiment}`"
        return ClaimResult(claim, Verdict(INCONCLUSIVE, reason), ev.effect or f"n/a: {reason}", None, ev.details)
    verdict = stats.combine(ev.parts)
    if claim.kind == "trained" and (ev.n or 0) < 2 and verdict.verdict != INCONCLUSIVE:
        verdict = Verdict(INCONCLUSIVE, f"{stats.ONE_SEED} (would be {verdict.verdict}: {verdict.reason})")
    return ClaimResult(claim, verdict, ev.effect, ev.n, ev.details)


def evaluate(runs: Iterable[Run], bench_files: Iterable[Path] | None = None) -> list[ClaimResult]:
    """Every claim of the registry against these runs (and the alignment benchmarks found on disk)."""
    files = tuple(bench_files) if bench_files is not None else find_bench_files()
    ctx = Context(tuple(runs), files)
    return [evaluate_claim(c, ctx) for c in CLAIMS]


def find_bench_files(roots: Iterable[Path] = (REPO, Path.cwd())) -> tuple[Path, ...]:
    found = {p.resolve() for root in roots for p in Path(root).glob(BENCH_GLOB)}
    return tuple(sorted(found))


def _min_n(*ns: int | None) -> int | None:
    present = [n for n in ns if n is not None]
    return min(present) if present else None


def _comparison_claim(ctx: Context, a: str, b: str, what: str, key=matched_key) -> tuple[Evidence, Comparison | None]:
    """The shared shape of "a beats b" claims: every matched comparison of b − a, the primary one deciding
    (rule: supported if its 95% CI lies above 0, contradicted if below 0, after the budget-match check)."""
    comps = compare_sides(ctx.runs, act_is(a), act_is(b), key, (a, b))
    best = primary(comps, ctx.base_setting)
    ev = Evidence()
    if best is None:
        return ev, None
    ev.parts.append((what, best.verdict()))
    ev.effect = f"{what} = {fmt_interval(best.diff)}"
    ev.n = best.diff.n
    ev.details = [comparison_line(c, what, c is best) for c in comps]
    return ev, best


# C1 ----------------------------------------------------------------------------------------------------


def _width_series(runs: Iterable[Run], act: str, fixed_budget: bool) -> dict[tuple, dict[float, list[Run]]]:
    """Ungated runs of one activation by (setting, bias, multiple_of, lr), then by width ratio."""
    series: dict[tuple, dict[float, list[Run]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        if r.act == act and not r.gated and bool(r.factor("model.non_embedding_params")) == fixed_budget:
            series[(r.setting, r.bias, r.multiple_of, r.lr)][r.ratio].append(r)
    return series


def _series_table(act: str, ratios: dict[float, list[Run]]) -> list[str]:
    lines = [f"| {act}: d_ff/d_model | d_model | d_ff | FFN params/layer | n | val loss (mean ± std) | 95% CI "
             "| BPB |", "|---|---|---|---|---|---|---|---|"]
    for ratio in sorted(ratios):
        runs = ratios[ratio]
        s, bpb = summary_of(runs), summary_of(runs, lambda r: r.bpb)
        r0 = runs[0]
        lines.append(f"| {ratio:g} | {r0.d_model} | {r0.d_ff} | {r0.ffn_params:,} | {s.n} | {fmt_mean_std(s)} | "
                     f"{fmt_ci(s)} | {fmt_mean_std(bpb, 3)} |")
    return lines


def _c1_fixed_d(act: str, ratios: dict[float, list[Run]], ev: Evidence) -> None:
    l2, l4, l8 = (by_seed(ratios[r]) for r in (2.0, 4.0, 8.0))
    gain_24 = stats.compare(l4, l2)  # loss(2) − loss(4): what going from 2× to 4× buys
    gain_48 = stats.compare(l8, l4)  # loss(4) − loss(8)
    common = set(l2) & set(l4) & set(l8)
    effect = stats.one_sample({s: (l2[s] - l4[s]) - (l4[s] - l8[s]) for s in common})
    if effect.n < 2 and min(len(l2), len(l4), len(l8)) >= 2:  # no shared seeds: unpaired difference of gains
        effect = stats.welch([l4[s] - l8[s] for s in set(l4) & set(l8)], [l2[s] - l4[s] for s in set(l2) & set(l4)])
    ev.parts.append((f"{act} at fixed d_model: 2→4 gain", stats.verdict_better(gain_24)))
    ev.parts.append((f"{act} at fixed d_model: Δ(2→4) − Δ(4→8)", stats.verdict_better(effect)))
    ev.effect += f"{'; ' if ev.effect else ''}{act}: Δ(2→4) − Δ(4→8) = {fmt_interval(effect)}"
    ev.n = _min_n(ev.n, effect.n)
    ev.details += [f"- {act}, fixed d_model: Δ(2→4) = loss(2×) − loss(4×) = {fmt_interval(gain_24)}; "
                   f"Δ(4→8) = {fmt_interval(gain_48)}; Δ(2→4) − Δ(4→8) = {fmt_interval(effect)} (n = {effect.n})"]


def _c1_fixed_budget(act: str, ratios: dict[float, list[Run]], ev: Evidence) -> None:
    l4 = by_seed(ratios[4.0])
    beaten, ns = [], []
    for ratio in sorted(r for r in ratios if r != 4.0):
        diff = stats.compare(by_seed(ratios[ratio]), l4)  # loss(4) − loss(r): > 0 means r beats 4×
        ns.append(diff.n)
        ev.details.append(f"- {act}, fixed budget: loss(4×) − loss({ratio:g}×) = {fmt_interval(diff)} (n = {diff.n})")
        if stats.verdict_better(diff).verdict == SUPPORTED:
            beaten.append(f"{ratio:g}×")
    label = f"{act} at a fixed budget: 4× not beaten"
    if beaten:
        ev.parts.append((label, Verdict(CONTRADICTED, f"beaten by {', '.join(beaten)} (95% CI above 0)")))
    elif min(ns) < 2:
        ev.parts.append((label, Verdict(INCONCLUSIVE, stats.ONE_SEED)))
    else:
        ev.parts.append((label, Verdict(SUPPORTED, "no other ratio's loss is significantly below 4×'s")))
    ev.n = _min_n(ev.n, min(ns))


def _largest(series: dict[tuple, dict[float, list[Run]]], need: set[float], base) -> tuple | None:
    """The series holding every ratio in `need` with the most seeds (then the sweep's common setting)."""
    ok = [k for k, ratios in series.items() if need <= set(ratios)]
    return min(ok, key=lambda k: (-min(len(by_seed(series[k][r])) for r in need), k[0] != base, str(k)),
               default=None)


def c1(ctx: Context) -> Evidence:
    ev = Evidence()
    seen_width_runs = False
    for act in ("relu", "gelu"):
        for fixed_budget in (False, True):
            series = _width_series(ctx.runs, act, fixed_budget)
            if not series:
                continue
            seen_width_runs = True
            need = {4.0} if fixed_budget else {2.0, 4.0, 8.0}
            key = _largest(series, need, ctx.base_setting)
            if key is None or (fixed_budget and len(series[key]) < 2):
                found = sorted({r for ratios in series.values() for r in ratios})
                what = "4× and another ratio" if fixed_budget else "2×, 4× and 8×"
                ev.parts.append((f"{act} {'fixed budget' if fixed_budget else 'fixed d_model'}",
                                 Verdict(INCONCLUSIVE, f"needs {what} (found {', '.join(f'{x:g}×' for x in found)}): "
                                                       "run `make sweep EXP=widths`")))
                continue
            heading = f"\n{act}, {describe_setting(key[0])}, lr {key[3]:g}:\n"
            ev.details += [heading, *_series_table(act, series[key]), ""]
            (_c1_fixed_budget if fixed_budget else _c1_fixed_d)(act, series[key], ev)
    if ev.n is None and seen_width_runs:
        ev.n = 0  # runs exist, just not the ones the rule needs (not "not in this sweep")
    return ev


# C2 ----------------------------------------------------------------------------------------------------


def c2(ctx: Context) -> Evidence:
    d = 768
    swiglu = size_ffn(FFNSpec("swiglu", budget=4), d)
    ungated = size_ffn(FFNSpec("gelu", width=4), d)
    llama = _refs()["LLaMA-7B"]
    lsize = size_ffn(llama.cfg.ffn, llama.cfg.d_model)
    equal = swiglu.params == ungated.params == 8 * d * d
    llama_ok = lsize.d_ff == 11008 and f"{lsize.nominal_d_ff:.2f}" == "10922.67"
    ev = Evidence(parts=[
        ("3·d·(8/3·d) = 2·d·4d = 8d²", Verdict(SUPPORTED if equal else CONTRADICTED,
                                            f"{swiglu.params:,} vs {ungated.params:,} vs 8d² = {8 * d * d:,}")),
        ("LLaMA-7B d_ff", Verdict(SUPPORTED if llama_ok else CONTRADICTED,
                                  f"2/3·4·4096 = {lsize.nominal_d_ff:.2f} → {lsize.d_ff}")),
    ])
    ev.effect = (f"d={d}: SwiGLU d_ff {swiglu.d_ff}, 3·d·d_ff = {swiglu.params:,} = 2·d·4d = {ungated.params:,}; "
                 f"LLaMA-7B: {lsize.nominal_d_ff:.2f} → {lsize.d_ff} = {lsize.d_ff // 256}·256")
    ev.details = [
        f"- d_model {d}: SwiGLU at budget 4 → d_ff = {swiglu.d_ff} (nominal {swiglu.nominal_d_ff:.2f}), "
        f"{swiglu.params:,} params; 4× ungated FFN: {ungated.params:,}; 8·d² = {8 * d * d:,}",
        f"- LLaMA-7B (d_model 4096, multiple_of 256): nominal {lsize.nominal_d_ff:.2f}, rounded up to {lsize.d_ff} "
        f"({lsize.params:,} params, {lsize.mismatch:+.3%} off the 4× budget)",
    ]
    gated = sorted({(r.act, r.d_model, r.ratio, r.d_ff, r.ffn_params, r.budget_mismatch, r.max_mismatch)
                    for r in ctx.runs if r.gated and r.sizing == "budget"})
    if gated:
        ev.details += ["", "Budget match of the trained gated runs:", "",
                       "| variant | d_model | budget | d_ff | FFN params/layer | mismatch | within max_mismatch |",
                       "|---|---|---|---|---|---|---|"]
        ev.details += [f"| {a} | {dm} | {r:g}× | {dff} | {p:,} | {m:+.3%} | {'yes' if abs(m) <= mx else '**no**'} |"
                       for a, dm, r, dff, p, m, mx in gated]
    return ev


# C3, C4, C8, C13: activations at a matched budget -----------------------------------------------------------


def c3(ctx: Context) -> Evidence:
    return _comparison_claim(ctx, "swiglu", "gelu", "loss(gelu) − loss(swiglu)")[0]


def _stability(ctx: Context, key: tuple, acts: tuple[str, ...]) -> tuple[list[str], dict[str, int]]:
    """Over the lr grid of one matched setting: per activation, the lrs run, diverged runs, and the spread of
    the mean final loss across lrs."""
    lines = ["", "| variant | lr | finished | diverged | val loss (mean ± std) |", "|---|---|---|---|---|"]
    diverged: dict[str, int] = {}
    for act in acts:
        runs = [r for r in ctx.runs if r.act == act and matched_key(r) == key]
        diverged[act] = sum(r.status == "diverged" for r in runs)
        means = []
        for lr in sorted({r.lr for r in runs}):
            at = [r for r in runs if r.lr == lr]
            s = summary_of(at)
            means += [s.mean] if s.mean is not None else []
            lines.append(f"| {act} | {lr:g} | {sum(r.usable for r in at)} | {sum(r.status == 'diverged' for r in at)} "
                         f"| {fmt_mean_std(s)} |")
        spread = f"{max(means) - min(means):.4f} nats" if len(means) >= 2 else "n/a"
        lines.insert(0, f"- {act}: {diverged[act]} diverged run(s); spread of the mean final loss across lrs: {spread}")
    return lines, diverged


def c4(ctx: Context) -> Evidence:
    ev, best = _comparison_claim(ctx, "gelu", "relu", "loss(relu) − loss(gelu)")
    if best is None:
        return ev
    lrs = {act: {r.lr for r in ctx.runs if r.act == act and matched_key(r) == best.key} for act in ("relu", "gelu")}
    if min(len(v) for v in lrs.values()) >= 2:
        lines, diverged = _stability(ctx, best.key, ("relu", "gelu"))
        ev.details += ["", f"Stability over the lr grid ({describe_key(best.key)}):", *lines]
        if diverged["gelu"] != diverged["relu"]:
            fewer = diverged["gelu"] < diverged["relu"]
            ev.parts.append(("stability", Verdict(SUPPORTED if fewer else CONTRADICTED,
                                                  f"diverged runs: gelu {diverged['gelu']}, relu {diverged['relu']}")))
    else:
        ev.details.append("- stability: no lr grid for both relu and gelu in this sweep (`make sweep EXP=lr`)")
    return ev


def c8(ctx: Context) -> Evidence:
    comps = compare_sides(ctx.runs, act_is("swish"), act_is("relu"), matched_key, ("swish", "relu"))
    ev = Evidence()
    if not comps:
        return ev
    what = "loss(relu) − loss(swish)"
    depths = sorted({dict(c.key[0])["model.n_layer"] for c in comps})
    deciding = []
    for depth in depths:
        best = primary([c for c in comps if dict(c.key[0])["model.n_layer"] == depth], ctx.base_setting)
        ev.parts.append((f"swish beats relu at {depth} layers", best.verdict()))
        ev.n = _min_n(ev.n, best.diff.n)
        deciding.append(best)
        ev.effect += f"{'; ' if ev.effect else f'{what}: '}{depth} layers {fmt_interval(best.diff)}"
    ev.details = [comparison_line(c, what, any(c is d for d in deciding)) for c in comps]
    if len(depths) < 2:
        ev.parts.append(("more so in deeper networks",
                         Verdict(INCONCLUSIVE, "needs two depths: run `make sweep EXP=depth`")))
        return ev
    shallow, deep = _depth_pair(comps, depths[0], depths[-1])
    if shallow is None:
        ev.parts.append(("more so in deeper networks",
                         Verdict(INCONCLUSIVE, "no pair of depths with otherwise equal settings")))
        return ev
    d_s, d_d = shallow.seed_diffs, deep.seed_diffs
    interaction = stats.one_sample({s: d_d[s] - d_s[s] for s in set(d_s) & set(d_d)})
    ev.parts.append((f"advantage larger at {depths[-1]} than at {depths[0]} layers", stats.verdict_better(interaction)))
    ev.n = _min_n(ev.n, interaction.n)
    ev.effect += f"; depth interaction = {fmt_interval(interaction)}"
    ev.details.append(f"- depth interaction: [loss(relu) − loss(swish)] at {depths[-1]} layers minus at {depths[0]} "
                      f"layers = {fmt_interval(interaction)} (n = {interaction.n})")
    return ev


def _depth_pair(comps: list[Comparison], shallow: int, deep: int) -> tuple[Comparison | None, Comparison | None]:
    """Two comparisons at the given depths that agree on everything else, with the most shared seeds."""
    def rest(c: Comparison) -> tuple:
        return (setting_without(c.key[0], "model.n_layer"), c.key[1:], c.lr)

    pairs = [(s, d) for s in comps for d in comps
             if dict(s.key[0])["model.n_layer"] == shallow and dict(d.key[0])["model.n_layer"] == deep
             and rest(s) == rest(d)]
    if not pairs:
        return None, None
    return max(pairs, key=lambda p: len(set(p[0].seed_diffs) & set(p[1].seed_diffs)))


def c13(ctx: Context) -> Evidence:
    ev = Evidence()
    for other in ("gelu", "swiglu"):
        part, best = _comparison_claim(ctx, other, "linear", f"loss(linear) − loss({other})")
        ev.parts += [(f"linear worse than {other}", v) for _, v in part.parts]
        ev.details += part.details
        if best is not None:
            ev.n = _min_n(ev.n, part.n)
            ev.effect += f"{'; ' if ev.effect else ''}{part.effect}"
    err = linear_collapse_error()
    ev.parts.append(("a linear FFN is one d×d map", Verdict(SUPPORTED if err < 1e-9 else CONTRADICTED,
                                                             f"relative max |FFN(x) − (xWᵀ + b)| = {err:.1e}")))
    ev.details.append(f"- analytic: a `linear` FeedForward (d_model 64, d_ff 256, biases) equals the single affine "
                      f"map W = W_down·W_up, b = W_down·b_up + b_down: relative max difference {err:.1e} (float64)")
    return ev


def linear_collapse_error(d_model: int = 64) -> float:
    """Build a `linear` FFN, compose its two matrices into one, and compare the outputs on random inputs."""
    import torch

    gen = torch.Generator().manual_seed(0)
    ffn = FeedForward(d_model, FFNSpec("linear", width=4, bias=True)).double()
    with torch.no_grad():
        for p in ffn.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
        w = ffn.w_down.weight @ ffn.w_up.weight
        b = ffn.w_down.weight @ ffn.w_up.bias + ffn.w_down.bias
        x = torch.randn(32, d_model, generator=gen, dtype=torch.float64)
        return float((ffn(x) - (x @ w.T + b)).abs().max() / (x @ w.T + b).abs().max())


# C5, C6: sparsity ----------------------------------------------------------------------------------------


def stat_of(which: str, key: str) -> Callable[[Run], float | None]:
    """A getter for one FFN activation statistic (zero_frac, dead_frac, never_positive_frac) of a run, at
    init or after training (final)."""

    def get(r: Run) -> float | None:
        block = r.init if which == "init" else r.final
        value = (block or {}).get(key)
        return float(value) if _finite(value) else None

    return get


def _per_seed_mean(runs: Iterable[Run], value: Callable[[Run], float | None]) -> dict[int, float]:
    """One number per seed (the mean over that seed's runs): runs that share a seed share their
    initialisation, so they are not independent samples of it."""
    groups: dict[int, list[float]] = defaultdict(list)
    for r in runs:
        v = value(r)
        if v is not None and r.status == "finished":
            groups[r.seed].append(v)
    return {s: sum(vs) / len(vs) for s, vs in groups.items()}


def c5(ctx: Context) -> Evidence:
    ev = Evidence()
    zero_at_init = stat_of("init", "zero_frac")
    measured = [r for r in ctx.runs if r.status == "finished" and zero_at_init(r) is not None]
    if not {"relu", "gelu"} & {r.act for r in measured}:
        return ev
    relu = stats.summarize(_per_seed_mean([r for r in measured if r.act == "relu"], zero_at_init).values())
    gelu = [r for r in measured if r.act == "gelu"]
    gelu_max = max((zero_at_init(r) for r in gelu), default=None)
    half = "relu zeroes about half at init"
    ev.parts.append((half, stats.verdict_within(relu, (0.4, 0.6), (0.3, 0.7)) if relu.n
                     else Verdict(INCONCLUSIVE, "no relu runs in this sweep")))
    no_zeros = "gelu has no hard zeros at init"
    ev.parts.append((no_zeros, Verdict(SUPPORTED if gelu_max == 0 else CONTRADICTED,
                                       f"largest zero fraction of a gelu run at init: {gelu_max:.3g}") if gelu
                     else Verdict(INCONCLUSIVE, "no gelu runs in this sweep")))
    ev.n = _min_n(relu.n or None, len({r.seed for r in gelu}) or None)
    ev.effect = (f"relu zero fraction at init {fmt_interval(relu, unit='', signed=False)}; "
                 f"largest gelu zero fraction at init {'n/a' if gelu_max is None else f'{gelu_max:.3g}'}")
    ev.details = ["| variant | seeds | zero fraction at init (mean ± std) | 95% CI | after training (mean ± std) "
                  "| dead units after training |", "|---|---|---|---|---|---|"]
    for act in sorted({r.act for r in measured}):
        runs = [r for r in measured if r.act == act]
        init, final, dead = (stats.summarize(_per_seed_mean(runs, stat_of(when, key)).values())
                             for when, key in (("init", "zero_frac"), ("final", "zero_frac"), ("final", "dead_frac")))
        ev.details.append(f"| {act} | {init.n} | {fmt_mean_std(init, 3)} | {fmt_ci(init, 3)} "
                          f"| {fmt_mean_std(final, 3)} | {fmt_mean_std(dead, 3)} |")
    return ev


def c6(ctx: Context) -> Evidence:
    ev = Evidence()
    relu = [r for r in ctx.runs if r.act == "relu"]
    if not relu:
        return ev
    groups = group_by(relu, matched_key)
    key = min(groups, key=lambda k: (-len({r.lr for r in groups[k]}), -len(groups[k]), str(k)))
    lrs = sorted({r.lr for r in groups[key]})
    ev.details = _sparsity_table(ctx, key)
    if len(lrs) < 2:
        ev.n = len({r.seed for r in relu})
        ev.parts.append(("dead relu units at the largest lr",
                         Verdict(INCONCLUSIVE, "needs ≥ 2 learning rates: run `make sweep EXP=sparsity`")))
        return ev
    dead = stat_of("final", "dead_frac")
    measured = [lr for lr in lrs if _per_seed_mean([r for r in groups[key] if r.lr == lr], dead)]
    if not measured:
        ev.n = 0
        ev.parts.append(("dead relu units at the largest lr", Verdict(INCONCLUSIVE, "no finished relu run")))
        return ev
    top = measured[-1]
    s = stats.summarize(_per_seed_mean([r for r in groups[key] if r.lr == top], dead).values())
    note = "" if top == lrs[-1] else f" (every run at lr {lrs[-1]:g} diverged)"
    ev.parts.append((f"relu dead fraction at lr {top:g} ≥ {DEAD_REPORTED:g}", stats.verdict_at_least(s, DEAD_REPORTED)))
    ev.n = s.n
    ev.effect = f"relu dead fraction at lr {top:g}{note}: {fmt_interval(s, unit='', signed=False)}"
    return ev


def _sparsity_table(ctx: Context, key: tuple) -> list[str]:
    lines = [f"In {describe_key(key)}:", "",
             "| variant | lr | finished | diverged | dead units (mean ± std) | never positive | zero fraction |",
             "|---|---|---|---|---|---|---|"]
    runs = [r for r in ctx.runs if matched_key(r) == key]
    for act in sorted({r.act for r in runs}):
        for lr in sorted({r.lr for r in runs if r.act == act}):
            at = [r for r in runs if r.act == act and r.lr == lr]
            cells = [stats.summarize(_per_seed_mean(at, stat_of("final", k)).values())
                     for k in ("dead_frac", "never_positive_frac", "zero_frac")]
            lines.append(f"| {act} | {lr:g} | {sum(r.status == 'finished' for r in at)} | "
                         f"{sum(r.status == 'diverged' for r in at)} | " + " | ".join(fmt_mean_std(c, 3) for c in cells)
                         + " |")
    return lines


# C7: biases ------------------------------------------------------------------------------------------------


def _bias_free_key(r: Run) -> tuple | None:
    if r.budget_ratio is None:
        return None
    return (r.setting, ("act", r.act), ("budget", r.budget_ratio), ("multiple_of", r.multiple_of))


def _mean_tps(runs: Iterable[Run]) -> str:
    s = stats.summarize(r.tokens_per_s for r in runs if r.usable and r.tokens_per_s is not None)
    return f"{s.mean:,.0f}" if s.n else "n/a"


def c7(ctx: Context) -> Evidence:
    ev = Evidence()
    comps = compare_sides(ctx.runs, lambda r: r.bias, lambda r: not r.bias, _bias_free_key, ("bias", "no bias"))
    for act in sorted({dict(c.key[1:])["act"] for c in comps}):
        mine = [c for c in comps if dict(c.key[1:])["act"] == act]
        best = primary(mine, ctx.base_setting)
        ev.parts.append((f"{act}: dropping biases costs < {BIAS_MARGIN:g} nats",
                         best.verdict(lambda d: stats.verdict_below(d, BIAS_MARGIN))))
        ev.n = _min_n(ev.n, best.diff.n)
        ev.effect += f"{'; ' if ev.effect else ''}{act}: loss(no bias) − loss(bias) = {fmt_interval(best.diff)}"
        ev.details += [comparison_line(c, f"{act}: loss(no bias) − loss(bias)", c is best) for c in mine]
        ev.details.append(f"  - tokens/s with bias {_mean_tps(best.a_runs)}, without {_mean_tps(best.b_runs)}")
    return ev


# C9: alignment benchmark ----------------------------------------------------------------------------------


def _band(row: dict) -> tuple[float, float]:
    """The cost per parameter ± half its interquartile range (scaled from the timing's IQR)."""
    ns, rel = float(row["ns_per_param"]), float(row["ms_iqr"]) / float(row["ms_median"])
    return ns * (1 - rel / 2), ns * (1 + rel / 2)


def _alignment_rows(data: dict) -> list[str]:
    lines = ["| d_ff | multiple of | median ms | IQR ms | params | ns/param |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['d_ff']} | {r.get('multiple_of')} | {r['ms_median']:.4g} | {r['ms_iqr']:.3g} | {r['params']:,} "
              f"| {r['ns_per_param']:.4g} |" for r in data["rows"]]
    return lines


def _alignment_verdict(rows: list[dict]) -> Verdict:
    """GPU: supported if every d_ff that is a multiple of 64 costs less per parameter than every unaligned
    d_ff beyond both IQR bands; contradicted if none does; inconclusive otherwise."""
    aligned = [r for r in rows if int(r["d_ff"]) % ALIGNMENTS[0] == 0]
    unaligned = [r for r in rows if int(r["d_ff"]) % ALIGNMENTS[0] != 0]
    if not aligned or not unaligned:
        return Verdict(INCONCLUSIVE, "needs both aligned and unaligned d_ff rows")
    wins = [a for a in aligned if all(_band(a)[1] < _band(u)[0] for u in unaligned)]
    text = f"{len(wins)} of {len(aligned)} aligned sizes cheaper per parameter than d_ff " + \
           ", ".join(str(u["d_ff"]) for u in unaligned) + " beyond the IQR bands"
    if len(wins) == len(aligned):
        return Verdict(SUPPORTED, text)
    return Verdict(CONTRADICTED if not wins else INCONCLUSIVE, text)


def c9(ctx: Context) -> Evidence:
    ev = Evidence()
    cpu_only = True
    for path in ctx.bench_files:
        try:
            data = json.loads(Path(path).read_text())
            machine, rows = data["machine"], data["rows"]
            table = _alignment_rows(data)
        except (OSError, ValueError, KeyError, TypeError) as e:
            ev.details.append(f"- {path}: unreadable ({type(e).__name__}: {e})")
            continue
        gpu = machine.get("accelerator") == "gpu"
        label = machine.get("gpu") or machine.get("cpu") or machine.get("label") or str(path.parent.name)
        ev.details += [f"\n{'GPU' if gpu else 'CPU'}: {label} (torch {machine.get('torch')}; {path.parent.name}):\n",
                       *table, ""]
        if gpu:
            cpu_only = False
            verdict = _alignment_verdict(rows)
            ev.parts.append((f"{label}", verdict))
            ev.effect += f"{'; ' if ev.effect else ''}{label}: {verdict.reason}"
    if not ctx.bench_files:
        ev.parts.append(("benchmark", Verdict(INCONCLUSIVE, f"no {BENCH_GLOB}: run `make bench`")))
        ev.effect = "n/a: not benchmarked (`make bench`)"
    elif cpu_only:
        ev.parts.append(("benchmark", Verdict(INCONCLUSIVE, "no tensor cores on this machine: CPU timings only "
                                                            "(run `make bench` on a GPU)")))
        ev.effect = "n/a: CPU timings only, no tensor cores (shown below)"
    return ev


# C10, C11, C12: the documents' numbers ---------------------------------------------------------------------


def _refs() -> dict[str, Any]:
    return {m.name: m for m in reference_models()}


def _ref_params() -> dict[str, ParamBreakdown]:
    return {name: count_params(m.cfg) for name, m in _refs().items()}


def c10(ctx: Context) -> Evidence:
    refs = _ref_params()
    shares = {name: p.ffn_share for name, p in refs.items()}
    bert = refs["BERT-base"]
    share_ok = all(abs(s - 2 / 3) < 0.01 for s in shares.values())
    bert_ok = round(bert.ffn_per_layer / 1e6, 1) == 4.7 and round(bert.attention_per_layer / 1e6, 1) == 2.4
    ev = Evidence(parts=[
        ("FFN ≈ 2/3 of FFN + attention", Verdict(SUPPORTED if share_ok else CONTRADICTED,
                                                 ", ".join(f"{k} {v:.1%}" for k, v in shares.items()))),
        ("BERT-base 4.7M vs 2.4M", Verdict(SUPPORTED if bert_ok else CONTRADICTED,
                                          f"FFN {bert.ffn_per_layer:,}, attention {bert.attention_per_layer:,}")),
    ])
    ev.effect = ", ".join(f"{k}: FFN share {v:.1%}" for k, v in shares.items())
    ev.details = [f"- {name}: FFN {p.ffn_per_layer:,} / attention {p.attention_per_layer:,} params per layer; FFN is "
                  f"{p.ffn_share:.2%} of FFN + attention ({p.ffn_per_layer / p.block:.2%} of the block with its norms)"
                  for name, p in refs.items()]
    return ev


def measured_ffn_flops(d_model: int, spec: FFNSpec, n_tokens: int) -> int:
    """Forward FLOPs of one FeedForward over n tokens as torch's FlopCounterMode counts them (on the meta
    device: shapes only, nothing is computed)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        ffn = FeedForward(d_model, spec)
        x = torch.zeros(1, n_tokens, d_model)
    with FlopCounterMode(display=False) as counter:
        ffn(x)
    return int(counter.get_total_flops())


def c11(ctx: Context) -> Evidence:
    bert = _refs()["BERT-base"].cfg
    d, n = bert.d_model, DOC_SEQ_LEN
    d_ff = size_ffn(bert.ffn, d).d_ff
    formula = 4 * n * d * d_ff
    analytic = ffn_forward_flops(n, d, d_ff, bert.ffn.gated)
    measured = measured_ffn_flops(d, bert.ffn, n)
    agree = formula == analytic == measured
    ev = Evidence(parts=[
        ("4·n·d·d_ff = accounting = FlopCounterMode", Verdict(SUPPORTED if agree else CONTRADICTED,
                                                              f"{formula:,} / {analytic:,} / {measured:,}")),
        ("≈ 4.8e9 for BERT-base, n = 512", Verdict(SUPPORTED if f"{formula:.1e}" == "4.8e+09" else CONTRADICTED,
                                                   f"{formula:.4g}")),
    ])
    ev.effect = f"4·{n}·{d}·{d_ff} = {formula:.4g}; FlopCounterMode: {measured:.4g}"
    ev.details = [f"- formula 4·n·d·d_ff: {formula:,}", f"- ffnbench.accounting.ffn_forward_flops: {analytic:,}",
                  f"- torch FlopCounterMode on a BERT-base FeedForward (GELU, biases) over {n} tokens: {measured:,} "
                  "(biases and the activation are not matmul FLOPs and are not counted)"]
    return ev


def c12(ctx: Context) -> Evidence:
    refs = _ref_params()
    bert = refs["BERT-base"]
    checks = [
        ("BERT-base 4.7M/layer", round(bert.ffn_per_layer / 1e6, 1) == 4.7, f"{bert.ffn_per_layer:,}"),
        ("GPT-2 small 4.7M/layer", round(refs["GPT-2 small"].ffn_per_layer / 1e6, 1) == 4.7,
         f"{refs['GPT-2 small'].ffn_per_layer:,}"),
        ("LLaMA-7B ≈135M/layer", round(refs["LLaMA-7B"].ffn_per_layer / 1e6) == 135,
         f"{refs['LLaMA-7B'].ffn_per_layer:,}"),
        ("18.9 MB/layer fp32", round(bytes_of(bert.ffn_per_layer) / 1e6, 1) == 18.9,
         f"{bytes_of(bert.ffn_per_layer):,} B"),
        ("≈227 MB for 12 layers", round(bytes_of(bert.ffn_total) / 1e6) == 227, f"{bytes_of(bert.ffn_total):,} B"),
    ]
    ev = Evidence(parts=[(label, Verdict(SUPPORTED if ok else CONTRADICTED, value)) for label, ok, value in checks])
    ev.effect = "; ".join(f"{label.split(' ')[0]} {value}" for label, _, value in checks[:3]) + \
        f"; {bytes_of(bert.ffn_per_layer) / 1e6:.1f} MB, {bytes_of(bert.ffn_total) / 1e6:.1f} MB"
    ev.details = [f"- {label}: {value} → {'matches' if ok else '**does not match**'}" for label, ok, value in checks]
    return ev


# ---- the registry -----------------------------------------------------------------------------------------

_BETTER = "supported if the 95% CI of Δ lies above 0, contradicted if it lies below 0, inconclusive otherwise"

CLAIMS: tuple[Claim, ...] = (
    Claim("C1", "d_ff = 4·d_model is the sweet spot: 2× limits the FFN's capacity, while 8× adds parameters for "
          "diminishing returns.", "001 §3.4.4, 002 §6.1, 000", "trained", "widths",
          "ungated relu and gelu at width ratios 2, 4, 8 (fixed d_model; budget-sized ungated runs count as the same "
          "width), and at a fixed non-embedding budget (model.non_embedding_params)",
          "per activation at fixed d_model, paired by seed: Δ(2→4) = loss(2×) − loss(4×) and the effect "
          "Δ(2→4) − Δ(4→8); supported if both 95% CIs lie above 0 (4× helps, and returns diminish past 4×), "
          "contradicted if either lies below 0; at a fixed budget (when run): contradicted if any ratio's loss is "
          "significantly below 4×'s (CI of loss(4×) − loss(r) above 0); all parts must hold",
          "If 4× is a sweet spot, going from 2× to 4× must buy more loss than going from 4× to 8×, and with the "
          "parameter budget fixed no other ratio should beat it.", c1),
    Claim("C2", "A SwiGLU FFN at d_ff = 8/3·d_model has the parameters of a 4× ungated FFN (3·d·8/3·d = 8d²), and "
          "LLaMA-7B's 11008 is 2/3·4·4096 = 10922.67 rounded up to a multiple of 256.",
          "001 §3.4.4, 002 §3.4 and §6.2, 004 §8", "analytic", None,
          "none (exact counts from ffnbench.ffn.size_ffn); lists the budget match of trained gated runs",
          "supported iff the exact integer counts are equal (3·768·2048 = 2·768·3072 = 8·768²) and LLaMA-7B's sizing "
          "gives 10922.67 → 11008",
          "Three d×h matrices hold as many weights as two d×4d ones exactly when h = 8/3·d.", c2),
    Claim("C3", "At the same parameter budget, a SwiGLU FFN beats a single-path GELU FFN.",
          "003 §4, 002 §3.4, 004 §7", "trained", "activations",
          "gelu and swiglu at the same budget ratio, bias and model, paired by seed",
          f"Δ = loss(gelu) − loss(swiglu) at a matched budget (|budget mismatch| ≤ ffn.max_mismatch, else "
          f"inconclusive); {_BETTER}",
          "The gate's extra expressiveness must show up as lower loss when both FFNs hold the same number of "
          "parameters; otherwise SwiGLU only wins by being bigger.", c3),
    Claim("C4", "GELU trains better and more stably than ReLU.", "002 §3.2, 003 §3", "trained", "activations",
          "relu and gelu at a matched budget; an lr grid (`make sweep EXP=lr`) for the stability part",
          f"Δ = loss(relu) − loss(gelu) at a matched budget, each at its best lr when both ran an lr grid; {_BETTER}. "
          "Stability (lr grid only): diverged runs counted per activation; if they differ, GELU diverging less "
          "is supported, more is contradicted",
          "Better means lower loss on the same data and budget; more stable means fewer divergences and less "
          "sensitivity across learning rates.", c4),
    Claim("C5", "ReLU sets about half of the FFN's hidden activations to exactly zero; GELU has no hard zeros.",
          "000 (try it yourself), 001 §3.4.4", "trained", "sparsity",
          "every relu and gelu run's ffn_stats (init: the validation pass at step 0; final: after training)",
          "relu's zero fraction at init (one value per seed): supported if its 95% CI lies within 0.5 ± 0.1, "
          "contradicted if it lies outside 0.5 ± 0.2; gelu: supported if every run has exactly 0 zeros at init, "
          "contradicted if any has one; both parts must hold; trained values are reported",
          "A symmetric pre-activation is negative half the time, and max(0, x) maps every negative to exactly 0; "
          "x·Φ(x) is 0 only at x = 0.", c5),
    Claim("C6", "At large learning rates many ReLU units die (zero on every input); 40%+ dead units are reported.",
          "002 §3.1", "trained", "sparsity",
          "relu (and other variants for comparison) at ≥ 2 learning rates, same setting otherwise",
          "dead fraction = units whose output is exactly 0 on every validation token after training, per seed; "
          "at the largest lr with finished runs: supported if its 95% CI is ≥ 0.4, contradicted if the CI lies "
          "below 0.4; needs ≥ 2 lrs",
          "A large update can push a unit's pre-activation below 0 for every input, after which it gets no "
          "gradient; if that is common at large lrs, the dead fraction should reach the reported 40%.", c6),
    Claim("C7", "The FFN biases can be dropped, as modern LLMs do, without hurting the model.", "002 §2.1",
          "trained", "bias", "each activation with and without FFN biases at a matched budget, paired by seed",
          f"equivalence per activation: Δ = loss(no bias) − loss(bias); supported if the 95% CI's upper bound is "
          f"below {BIAS_MARGIN:g} nats (the practical margin), contradicted if its lower bound is above it; every "
          "activation must hold; tokens/s shown with and without",
          "If biases matter, removing them costs loss; a cost reliably below a practical margin means they can "
          "go.", c7),
    Claim("C8", "Swish (SiLU) is smoother than ReLU and beats it, more so in deep networks.", "002 §3.3", "trained",
          "depth", "relu and swish at a matched budget, at two depths (model.n_layer)",
          f"Δ = loss(relu) − loss(swish) at each depth ({_BETTER}); and the depth interaction "
          "Δ(deep) − Δ(shallow), paired by seed, supported if its CI lies above 0, contradicted if below; all "
          "parts must hold",
          "A smoother activation should help optimisation, and more so as depth makes optimisation harder.", c8),
    Claim("C9", "Rounding d_ff up to a multiple of 64/128/256 makes the FFN run faster on tensor cores.",
          "002 §6.2, 004 §8.2", "benchmark", None,
          f"{BENCH_GLOB} from `make bench` (FFN timings at d_ff 682 / 704 / 768)",
          "GPU only: supported if every d_ff that is a multiple of 64 costs less time per parameter than every "
          "unaligned d_ff (682) beyond both interquartile bands, contradicted if none does, inconclusive if some "
          "do; CPU-only data is inconclusive (no tensor cores)",
          "Aligned shapes tile exactly onto tensor-core fragments; if that matters, the aligned sizes must be "
          "cheaper per parameter, not merely faster because they are smaller.", c9),
    Claim("C10", "The FFN holds about 2/3 of a block's parameters (BERT-base: FFN 4.7M vs attention 2.4M).",
          "002 (introduction), 000 (example 1)", "analytic", None,
          "none (ffnbench.accounting.count_params on BERT-base, GPT-2 small, LLaMA-7B)",
          "supported iff every reference model's FFN ÷ (FFN + attention) is within 2/3 ± 0.01 and BERT-base's "
          "per-layer counts round to 4.7M and 2.4M",
          "A 4× FFN has 8d² weights against attention's 4d²: 8/12 = 2/3.", c10),
    Claim("C11", "An FFN layer costs ≈ 4·n·d_model·d_ff FLOPs over n tokens: 4.8e9 for BERT-base at n = 512.",
          "000 (example 2)", "analytic", None,
          "none (the formula, ffnbench.accounting, and torch's FlopCounterMode on a BERT-base FeedForward)",
          "supported iff the formula, the accounting module and FlopCounterMode give the same integer and it "
          "rounds to 4.8e9",
          "Two d×d_ff matmuls per token at 2 FLOPs per multiply-add: 2·2·d·d_ff per token.", c11),
    Claim("C12", "FFN sizes: 4.7M parameters per layer for BERT-base and GPT-2 small, ≈135M for LLaMA-7B; "
          "18.9 MB per layer in fp32, ≈227 MB for 12 layers.", "000 (table), 002 §3.4", "analytic", None,
          "none (ffnbench.accounting.count_params on the reference models)",
          "supported iff every number matches the exact count rounded to the documents' precision",
          "The documents' table is arithmetic on the models' published shapes; it must come out the same.", c12),
    Claim("C13", "Without a nonlinearity the two FFN linears collapse into one linear map, and the FFN loses its "
          "point.", "002 §3, 003 §2", "trained", "linear",
          "linear (no activation) against gelu and swiglu at a matched budget; plus an analytic check",
          f"analytic: a `linear` FeedForward must equal one composed affine map (relative error < 1e-9); trained: "
          f"Δ = loss(linear) − loss(gelu) and loss(linear) − loss(swiglu); {_BETTER}; all parts must hold",
          "If the two matrices collapse to one map, the FFN can only add a linear map to the residual stream, so "
          "the model must do measurably worse than with a real nonlinearity.", c13),
)

CLAIM_IDS = tuple(c.id for c in CLAIMS)
