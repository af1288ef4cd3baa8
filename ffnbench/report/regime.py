"""The regime view: each headline difference, best-vs-best, in every (size, training length, init) cell the sweep ran.

A claim's verdict is decided in one setting and checked against the others (claims.robust); this view puts the
numbers of every cell side by side, so that one look shows where the textbook ordering appears and where it does
not. Each difference is signed so that a positive value is the textbook's order (the first-named variant has the
higher loss). A cell's value is the comparison the claims use there: each side at the lr its tuning runs chose,
judged on fresh seeds (pairing.compare_sides), with the claims' interval."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass

from ffnbench.claims.band import PRACTICE_BAND, in_band
from ffnbench.claims.bias import bias_free_key
from ffnbench.claims.claim import Observations
from ffnbench.claims.pairing import FRESH_SEEDS, Comparison, act_is, compare_sides, matched_key
from ffnbench.claims.robust import nested, pairs_check
from ffnbench.claims.runs import Run, Setting, init_name

# (a, b): the difference loss(b) − loss(a), which the textbooks say is positive (b is the worse FFN): C4, C3, C13
# and C8 (swish beats relu); and C7's loss(gelu without biases) − loss(gelu with them), which they say is about 0
BIASED = "gelu+bias"
HEADLINE: tuple[tuple[str, str], ...] = (("gelu", "relu"), ("swiglu", "gelu"), ("gelu", "linear"), ("swish", "relu"),
                                         (BIASED, "gelu"))
NEAR_ZERO = {(BIASED, "gelu")}  # the pairs whose textbook value is ≈ 0, not > 0
BUDGET = 4  # the textbook's matched budget: the parameters of a 4·d_model ungated FFN
FIGURE = "regime.png"


def what(a: str, b: str) -> str:
    return f"loss({b}) − loss({a})"


@dataclass(frozen=True)
class Cell:
    """One (size, length, init, stability options) setting, in words and in sort order."""

    setting: Setting

    def factor(self, name: str):
        return dict(self.setting).get(name)

    @property
    def label(self) -> str:
        s = dict(self.setting)
        words = [f"{s.get('model.name')} (d {s.get('model.d_model')}, {s.get('model.n_layer')} layers)",
                 f"{s.get('trainer.tokens_per_param') or 0:g} tok/param", f"{init_name(self.setting)} init"]
        if s.get("model.qk_norm") or s.get("optim.z_loss"):
            words.append(f"qk-norm, z-loss {s.get('optim.z_loss') or 0:g}")
        return ", ".join(words)


def _in_view(c: Comparison) -> bool:
    """A best-vs-best comparison on fresh seeds at the textbook budget and FFN (no bias, no rounding, GPT-2's FFN
    init), in a model sized by its d_model (not solved for a fixed budget)."""
    s = dict(c.key.setting)
    return (c.best_lr and c.protocol == FRESH_SEEDS and c.key.budget == BUDGET and not c.key.bias
            and c.key.multiple_of == 1 and s.get("model.ffn_init") in (None, "gpt2")
            and s.get("model.non_embedding_params") is None)


def regime(runs: list[Run]) -> tuple[list[Cell], dict[tuple[Cell, tuple[str, str]], Comparison]]:
    """The cells (the sweep's base setting first, then by size, length, init) and each headline pair's
    comparison in them. The table and the figure of one report read the same runs: their intervals (a bootstrap
    each) are worked out once."""
    return _regime(tuple(runs))


@functools.lru_cache(maxsize=1)
def _regime(runs: tuple[Run, ...]) -> tuple[list[Cell], dict[tuple[Cell, tuple[str, str]], Comparison]]:
    found: dict[tuple[Cell, tuple[str, str]], Comparison] = {}
    for a, b in HEADLINE:
        if a == BIASED:  # C7's pairing: the same activation with and without FFN biases
            comps = compare_sides(runs, lambda r, act=b: r.act == act and r.bias,
                                  lambda r, act=b: r.act == act and not r.bias, bias_free_key, (a, b))
        else:
            comps = compare_sides(runs, act_is(a), act_is(b), matched_key, (a, b))
        for c in comps:
            if _in_view(c):  # the interval the verdicts read: with the lr choice where neighbour runs exist
                found[(Cell(c.key.setting), (a, b))] = nested(c) or c
    cells = sorted({cell for cell, _ in found}, key=lambda cl: (
        bool(cl.factor("model.qk_norm")), cl.factor("model.d_model") or 0, cl.factor("trainer.tokens_per_param") or 0,
        init_name(cl.setting), cl.factor("model.n_layer") or 0, cl.label))  # a total order: sets are unordered
    base = Cell(Observations.of(runs).base_setting)  # where the verdicts are decided: first
    return ([base] if base in cells else []) + [cl for cl in cells if cl != base], found


def _cell_text(c: Comparison | None) -> str:
    if c is None or c.diff.mean is None:
        return "–"
    d = c.diff
    ci = f" [{d.ci_low:+.3f}, {d.ci_high:+.3f}]" if d.has_ci else " (no interval)"
    return f"{d.mean:+.3f}{ci}, n = {d.n}"


@functools.cache
def _preactivation_std(config_json: str) -> float | None:
    """The std of the FFN pre-activations (the activation's input: w_up x, or w_gate x when gated) over every layer,
    of the model a run's config builds, at its init (its seed), on 8 windows of random token ids: at init the
    layer norm in front of the FFN makes it nearly data-free (≈ init std · √d_model). None when the config cannot
    be built here (a tokenizer that needs files)."""
    import torch

    from ffnbench.config.schema import run_spec
    from ffnbench.data.tokenizer import vocab_size_for
    from ffnbench.model.model import GPT

    config = json.loads(config_json)
    try:
        spec = run_spec(config, vocab_size_for(config["data"]))
    except Exception:
        return None
    model = GPT(spec.model, seed=spec.seed).eval()
    pre: list[torch.Tensor] = []
    hooks = [(f.w_gate if f.spec.gated else f.w_up).register_forward_hook(lambda m, i, o: pre.append(o.flatten()))
             for f in model.ffns]
    idx = torch.randint(0, spec.model.vocab_size, (8, spec.model.seq_len), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(idx)
    for h in hooks:
        h.remove()
    return float(torch.cat(pre).std())


def preactivation_std(runs: list[Run], cell: Cell) -> float | None:
    """The FFN pre-activation std at init of the cell's gelu model (its first seed), or of another of its models."""
    mine = sorted((r for r in runs if r.setting == cell.setting), key=lambda r: (r.act != "gelu", r.seed, r.name))
    return _preactivation_std(json.dumps(mine[0].result.config, sort_keys=True, default=str)) if mine else None


def regime_section(runs: list[Run]) -> list[str]:
    """REPORT.md's regime table: a row per cell, a column per headline difference (empty when no cell has one)."""
    cells, found = regime(runs)
    if len(cells) < 2:  # one setting: the claims' table already holds its numbers
        return []
    head = " | ".join(what(a, b) for a, b in HEADLINE)
    lines = ["## Regime: the headline differences in every setting", "",
             "Each headline difference, each side at its own tuned lr and judged on fresh seeds, in every (size, "
             "training length, init) cell the sweep ran: nats/token, 95% interval, seeds. **Positive is the "
             "textbook's order** (GELU beats ReLU, SwiGLU beats GELU, a nonlinearity beats none, Swish beats ReLU); "
             "for GELU without against with FFN biases the textbook's value is about 0. The first row is "
             "the setting the verdicts are decided in; the claims' robustness labels compare against the others. "
             "**Pre-activation std**: the std of the FFN's pre-activations at init, measured on the cell's model "
             "(random tokens; the layer norm makes it ≈ init std · √d_model): GPT-2 small's is about 0.55 "
             f"(0.02 · √768), LLaMA-7B's 1.28. Cells inside the practice band [{PRACTICE_BAND[0]:g}, "
             f"{PRACTICE_BAND[1]:g}] decide; a cell outside it (marked) is a sensitivity check. "
             f"Figure: `figures/{FIGURE}`.", "",
             f"| setting | pre-activation std at init | {head} |", "|---|---|" + "---|" * len(HEADLINE)]
    for cell in cells:
        std = preactivation_std(runs, cell)
        mark = "" if in_band(cell.setting) else " (outside the band)"
        lines.append(f"| {cell.label} | {'n/a' if std is None else f'{std:.2f}'}{mark} | "
                     + " | ".join(_cell_text(found.get((cell, pair))) for pair in HEADLINE) + " |")
    return [*lines, "", *_neighbour_lines(cells, found)]


def _neighbour_lines(cells: list[Cell], found: dict[tuple[Cell, tuple[str, str]], Comparison]) -> list[str]:
    """Where a side of a cell's difference was also judged at its chosen lr's neighbours: the difference at every
    pair of judged lrs, and whether its sign holds at all of them. A follow-up grid may judge one side alone there
    (its optimum was not bracketed), and these lines are where its numbers show. C7's pair is left to C7's section:
    its textbook value is about 0, so its sign says nothing (the claim reads its margin)."""
    shown = [(cell, pair, c) for cell in cells for pair in HEADLINE if pair not in NEAR_ZERO
             and (c := found.get((cell, pair))) is not None and (c.a_neighbours or c.b_neighbours)]
    if not shown:
        return []
    lines = ["At the chosen lrs' neighbours (×√2, ÷√2), where a cell's variants were judged there too (a side "
             "without neighbour runs: its chosen lr alone): each difference on the judged seeds at every pair of "
             "judged lrs, positive the textbook's order, and whether it keeps its sign at all of them "
             "(claims.lr_checks.pairs_check: a pair on the other side labels the comparison lr-sensitive; the "
             "interval that includes the lr choice decides). GELU without against with FFN biases is C7's, read "
             "against its margin in its own section:", ""]
    for cell, (a, b), c in shown:
        _, (line,) = pairs_check(c)
        lines.append(f"- {cell.label}, {what(a, b)}: {line.strip().removeprefix('- ')}")
    return [*lines, ""]
