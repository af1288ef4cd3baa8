"""The figures of sizes and budgets: loss against the FFN's width ratio (C1) and its parameters, and every variant
paired against gelu at the textbook budget."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

from ffnbench.claims import Run, describe_setting, group_by, summary_of
from ffnbench.claims.runs import short_setting
from ffnbench.report.comparisons import primary_runs, variant_order
from ffnbench.report.figures.plotting import error_bar, pyplot, save, varying_labels


def fig_loss_vs_ratio(runs: list[Run], out: Path) -> str | None:
    """Loss against d_ff / d_model, one line per ungated activation and budget with at least two ratios, from the
    judged runs: where a width had tuning runs, its judged runs at the lr they chose (the tuned points that decide
    C1), else one line per lr."""
    from ffnbench.claims.lr_protocol import chosen_lrs, tuning_key

    chosen = chosen_lrs(runs)

    def lr_of(r: Run):
        return "tuned" if tuning_key(r) in chosen else r.lr

    judged = [r for r in runs if r.usable and not r.gated and r.role == "judged"
              and (tuning_key(r) not in chosen or r.lr == chosen[tuning_key(r)])]
    series = group_by(judged,
                      lambda r: (("act", r.act), ("budget", "fixed N" if r.factor("model.non_embedding_params")
                                                  else "fixed d_model"), ("lr", lr_of(r)), ("setting", r.setting),
                                 ("bias", r.bias)))
    series = {k: group_by(v, lambda r: r.ratio) for k, v in series.items() if len({r.ratio for r in v}) >= 2}
    if not series:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    keys = sorted(series, key=str)
    # the setting in a legend's few words: two series that differ only in their init or length must not both read
    # 'gelu'
    words = [tuple((k, short_setting(v, named=False) if k == "setting" else v) for k, v in key) for key in keys]
    for key, label in zip(keys, varying_labels(words)):
        ratios = sorted(series[key])
        sums = [summary_of(series[key][x]) for x in ratios]
        ax.errorbar(ratios, [s.mean for s in sums], yerr=[error_bar(s) for s in sums], marker="o", capsize=3,
                    label=label or dict(key)["act"], linestyle="--" if dict(key)["budget"] == "fixed N" else "-")
    from matplotlib.ticker import ScalarFormatter

    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({x for ratios in series.values() for x in ratios}))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_xlabel("d_ff / d_model (FFN width ratio, log scale)")
    ax.set_ylabel("final validation loss (nats/token)")
    acts = sorted({dict(key)["act"] for key in keys})  # one activation: the legend names settings only, so say it
    ax.set_title(f"Loss vs FFN width ratio{f' of {acts[0]}' if len(acts) == 1 else ''}, judged runs (error bars: 95% "
                 "CI over seeds)", fontsize=9)
    ax.legend(fontsize=7)
    return save(fig, out, "loss_vs_ratio.png")


def fig_loss_vs_params(runs: list[Run], out: Path) -> str | None:
    """Loss against FFN parameters in the main comparison; skipped when all budgets match (within 10%)."""
    points = group_by([r for r in primary_runs(runs) if r.usable], lambda r: (r.act, r.label))
    sizes = {rs[0].ffn_total for rs in points.values()}
    if not sizes or max(sizes) < 1.1 * min(sizes):  # matched budgets only: that is the matched-budget figure
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    keys = sorted(points, key=lambda k: (points[k][0].ffn_total, str(k)))
    same = Counter(points[k][0].ffn_total for k in keys)
    placed: Counter = Counter()
    markers = "osD^v<>ph*"
    for i, k in enumerate(keys):
        size = points[k][0].ffn_total
        spread = 0.04 * (placed[size] - (same[size] - 1) / 2)  # variants of one size side by side, not on top
        placed[size] += 1
        s_ = summary_of(points[k])
        ax.errorbar([size * (1 + spread)], [s_.mean], yerr=[error_bar(s_)], marker=markers[i % len(markers)],
                    linestyle="none", capsize=3, color=pyplot().get_cmap("tab20")(i % 20), label=k[1])
    ax.set_xscale("log")
    ax.set_xlabel("FFN parameters, all layers (log scale)")
    ax.set_ylabel("final validation loss (nats/token)")
    ax.set_title("Loss vs FFN parameters, main comparison (error bars: 95% CI)", fontsize=10)
    ax.legend(fontsize=8, ncol=2)
    return save(fig, out, "loss_vs_ffn_params.png")


REFERENCE_ACT = "gelu"  # what fig_matched_budget differences every variant against


def fig_matched_budget(runs: list[Run], out: Path) -> str | None:
    """Each variant's paired difference from gelu at the textbook budget, as the verdicts read it (each side at its
    tuned lr on fresh seeds, the interval with the lr choice where neighbour runs exist), a panel per setting that
    ran such comparisons; at fixed lrs (a sweep without tuning), the paired difference at the lr with the most seeds."""
    from ffnbench.claims.pairing import act_is, compare_sides, matched_key
    from ffnbench.claims.robust import nested

    acts = sorted({r.act for r in runs if r.act != REFERENCE_ACT and r.budget_ratio == 4 and not r.bias},
                  key=lambda a: variant_order(next(r for r in runs if r.act == a)))
    cells: dict = defaultdict(dict)
    for act in acts:
        for c in compare_sides(runs, act_is(REFERENCE_ACT), act_is(act), matched_key, (REFERENCE_ACT, act)):
            if c.key.budget != 4 or c.key.bias or c.diff.mean is None:
                continue
            seen = cells[c.key.setting].get(act)
            rank = (c.best_lr, c.n)
            if seen is None or rank > (seen.best_lr, seen.n):
                cells[c.key.setting][act] = c
    cells = {k: v for k, v in cells.items() if v}
    if not cells:
        return None
    plt = pyplot()
    keys = sorted(cells, key=lambda k: (dict(k).get("model.init") not in (None, "gpt2"),
                                        dict(k).get("trainer.tokens_per_param") or 0, str(k)))
    fig, axes = plt.subplots(1, len(keys), figsize=(3.8 * len(keys) + 1.5, 0.38 * len(acts) + 1.8), sharey=True,
                             squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        for y, act in enumerate(acts):
            c = cells[key].get(act)
            if c is None:
                continue
            d = (nested(c) or c).diff
            err = [[d.mean - d.ci_low], [d.ci_high - d.mean]] if d.has_ci else None
            ax.errorbar([d.mean], [y], xerr=err, fmt="o", capsize=3, color="tab:blue" if c.best_lr else "tab:gray")
            ax.annotate(f"n={d.n}", (d.ci_high if d.has_ci else d.mean, y), xytext=(3, 0), textcoords="offset points",
                        fontsize=6, va="center")
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_title(describe_setting(key), fontsize=7)
        ax.set_xlabel(f"loss(variant) − loss({REFERENCE_ACT}), nats, 95% CI")
    axes[0][0].set_yticks(range(len(acts)), acts, fontsize=8)
    axes[0][0].set_ylim(len(acts) - 0.5, -0.5)
    import textwrap

    title = (f"Paired by seed against {REFERENCE_ACT} at a matched budget (4×); negative: the variant is better; "
             "blue: each at its tuned lr, grey: one shared lr")
    fig.suptitle("\n".join(textwrap.wrap(title, 70 * len(keys))), fontsize=8)
    return save(fig, out, "matched_budget.png")
