"""`python -m ffnbench.report [SWEEP_DIR | results.jsonl] [--out DIR]` (`make report SWEEP=dir`): the sweep's
runs → statistics over seeds → a verdict per claim → REPORT.md, results.jsonl and figures/*.png.

With no argument: the most recently started sweep (the newest runs/*/sweep.json). A results.jsonl (what a
published report commits) rebuilds the same report. `--wandb ENTITY/PROJECT [--group NAME]` reads the runs
from W&B instead of the disk, and `--wandb-report` also creates a W&B report (needs network, credentials and
the `ffnbench[wandb-reports]` extra).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ffnbench import stats
from ffnbench.claims import (
    MODEL_FACTORS,
    ClaimResult,
    Run,
    by_seed,
    describe_setting,
    fmt_ci,
    fmt_mean_std,
    fmt_p,
    group_by,
    stat_of,
    summary_of,
)
from ffnbench.claims import evaluate as evaluate_claims
from ffnbench.cli import user_errors_exit
from ffnbench.config import NON_IDENTITY_KEYS, flatten, identity_diff
from ffnbench.errors import FFNBenchError
from ffnbench.ffn import VARIANTS
from ffnbench.records import (
    METRICS,
    RESULT_FILE,
    RUN_CONFIG_FILE,
    STATUSES,
    SWEEP_MANIFEST,
    CorruptRecord,
    atomic_file,
    ffn_record,
    json_safe,
    model_record,
    read_json,
    read_result,
    summary_key,
    write_json_atomic,
)

REPORT_FILE = "REPORT.md"
RESULTS_FILE = "results.jsonl"
FIGURES_DIR = "figures"
RUNS_ROOT = Path("runs")
RESOLVE_EFFECT = 0.01  # nats: the difference the "seeds needed" column is sized for
# What a result.json keeps in results.jsonl: everything the report reads, without machine-local paths.
KEEP = ("schema", "status", "error", "name", "run_name", "seed", "config", "ffn", "model", "params", "flops", "data",
        "metrics", "ffn_stats", "curve", "steps", "total_steps", "tokens", "tokens_per_step", "throughput",
        "wall_time_s", "hardware", "versions", "git", "finished_at")
# The factors ffnbench studies: runs that differ only in these (and in where/how they were observed) can be
# pooled into one report. Anything else (token budget, data, weight decay, ...) makes them incomparable.
STUDIED = ("ffn", "seed", "optim.lr", *(f"model.{k}" for k in MODEL_FACTORS))
POOLABLE = (*NON_IDENTITY_KEYS, "name", *STUDIED)


# ---- loading ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unused:
    run: str
    status: str
    reason: str


@dataclass
class Loaded:
    runs: list[Run]  # finished and diverged
    unused: list[Unused]
    source: Path
    manifest: dict | None = None


def _first_line(text: Any, limit: int = 160) -> str:
    line = str(text or "").strip().splitlines()[0] if str(text or "").strip() else "no error recorded"
    return line if len(line) <= limit else line[: limit - 1] + "…"


def classify(record: dict, name: str) -> Run | Unused:
    """A record the analysis can use (finished or diverged), or why it cannot."""
    status = record.get("status")
    if status == "running":
        return Unused(name, status, f"still running (step {record.get('steps', '?')} of "
                                    f"{record.get('total_steps', '?')})")
    if status == "failed":
        return Unused(name, status, f"failed: {_first_line(record.get('error'))}")
    try:
        run = Run.from_record(record)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        return Unused(name, str(status), f"incomplete record ({type(e).__name__}: {e})")
    if status == "finished" and not run.usable:
        return Unused(name, status, "finished without a finite final validation loss")
    return run


def _resolve_run_dir(entry: str, sweep: Path) -> Path:
    """sweep.json lists run directories as the sweep saw them (often relative to where it ran)."""
    path = Path(entry)
    for candidate in ((path,) if path.is_absolute() else (Path.cwd() / path, sweep / path)):
        if candidate.exists():
            return candidate
    return sweep / path.name


def _run_dirs(sweep: Path, manifest: dict | None) -> list[Path]:
    if manifest and manifest.get("runs"):
        return [_resolve_run_dir(str(p), sweep) for p in manifest["runs"]]
    found = {p.parent for name in (RESULT_FILE, RUN_CONFIG_FILE) for p in sweep.rglob(name)}
    return sorted(found)


def _read_manifest(folder: Path) -> dict | None:
    """The sweep's sweep.json, if it has a readable one (without it the run directories are still found)."""
    try:
        return read_json(folder / SWEEP_MANIFEST) if (folder / SWEEP_MANIFEST).exists() else None
    except CorruptRecord:
        return None


def load_sweep(sweep: Path) -> Loaded:
    manifest = _read_manifest(sweep)
    dirs = _run_dirs(sweep, manifest)
    if not dirs:
        raise FFNBenchError(f"{sweep}: no runs found (expected {SWEEP_MANIFEST} or <run>/{RESULT_FILE} under it); make "
                            "a sweep with `make sweep` (or `make sweep EXP=<experiment>`), then "
                            "`make report SWEEP=<dir>`")
    loaded = Loaded([], [], sweep, manifest)
    for run_dir in dirs:
        try:
            record = read_result(run_dir)
        except CorruptRecord as e:
            loaded.unused.append(Unused(run_dir.name, "corrupt", str(e)))
            continue
        if record is None:
            loaded.unused.append(Unused(run_dir.name, "missing", f"no {RESULT_FILE} (not started yet, or killed "
                                                                  "before it wrote one)"))
            continue
        _add(loaded, classify(record, run_dir.name))
    return loaded


def load_jsonl(path: Path) -> Loaded:
    loaded = Loaded([], [], path, _read_manifest(path.parent))
    lines = [(i, line) for i, line in enumerate(path.read_text().splitlines(), 1) if line.strip()]
    if not lines:
        raise FFNBenchError(f"{path}: empty; expected one result record per line (written by `make report`)")
    for i, line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            loaded.unused.append(Unused(f"{path.name}:{i}", "corrupt", f"line {i}: invalid JSON ({e})"))
            continue
        if not isinstance(record, dict) or record.get("status") not in STATUSES:
            loaded.unused.append(Unused(f"{path.name}:{i}", "corrupt", f"line {i}: not a result record"))
            continue
        _add(loaded, classify(record, str(record.get("run_name") or f"{path.name}:{i}")))
    return loaded


def _add(loaded: Loaded, item: Run | Unused) -> None:
    (loaded.unused if isinstance(item, Unused) else loaded.runs).append(item)


def load(source: Path) -> Loaded:
    source = Path(source)
    if source.is_file():
        loaded = load_jsonl(source)
    elif source.is_dir():
        loaded = load_sweep(source)
    else:
        raise FFNBenchError(f"{source}: no such sweep directory or results.jsonl; make a sweep with `make sweep` "
                            "(its runs land in runs/<experiment>/), then `make report SWEEP=runs/<experiment>`")
    return checked(loaded)


def checked(loaded: Loaded) -> Loaded:
    """Refuse mixed configs; keep one record per variant and seed."""
    check_poolable(loaded.runs)
    loaded.runs, duplicates = drop_duplicates(loaded.runs)
    loaded.unused += duplicates
    return loaded


# ---- what may be pooled -----------------------------------------------------------------------------------


def _names(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def check_poolable(runs: list[Run]) -> None:
    """Refuse to pool runs that differ in anything but the studied factors: one message naming every
    differing key, its values, and the runs holding each value."""
    if not runs:
        return
    ref = runs[0].record["config"]
    keys = sorted({k for r in runs[1:] for k in identity_diff(ref, r.record["config"], POOLABLE)})
    if keys:
        flat = [(r.name, flatten(r.record["config"])) for r in runs]
        values = {}
        for key in keys:
            by_value: dict[str, list[str]] = defaultdict(list)
            for name, config in flat:
                by_value[repr(config.get(key))].append(name)
            values[key] = by_value
        keys_text = "; ".join(f"{key}: " + " vs ".join(f"{v} ({_names(names)})" for v, names in by_value.items())
                              for key, by_value in values.items())
        raise FFNBenchError(
            f"mixed configs: these runs differ in {', '.join(keys)}, not only in the factors ffnbench "
            f"studies (ffn.*, seed, optim.lr, model size/depth) — {keys_text}. Their losses are not comparable; "
            "report each config's runs separately (one sweep directory each)"
        )


def _identity(r: Run) -> str:
    studied = {k: v for k, v in flatten(r.record["config"]).items()
               if any(k == s or k.startswith(s + ".") for s in STUDIED)}
    return json.dumps(studied, sort_keys=True, default=str)


def drop_duplicates(runs: list[Run]) -> tuple[list[Run], list[Unused]]:
    """The same variant and seed twice (one run listed by two sweeps): keep one, finished before diverged.
    Two such records with different configs are refused."""
    kept: dict[str, Run] = {}
    dropped = []
    for r in sorted(runs, key=lambda r: (r.status != "finished", r.name)):
        identity = _identity(r)
        other = kept.get(identity)
        if other is None:
            kept[identity] = r
            continue
        diff = identity_diff(other.record["config"], r.record["config"], (*NON_IDENTITY_KEYS, "name"))
        if diff:
            raise FFNBenchError(f"runs {other.name} and {r.name} are the same variant and seed with different configs "
                                f"({', '.join(diff)}); remove one of them from the sweep")
        dropped.append(Unused(r.name, r.status, f"duplicate of {other.name} (same variant, seed and config)"))
    return sorted(kept.values(), key=lambda r: r.name), dropped


# ---- tables -----------------------------------------------------------------------------------------------


def cell(text: Any) -> str:
    """Markdown table cells cannot hold a bare '|'."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(header: list[str], rows: Iterable[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines


_ACT_ORDER = {name: i for i, name in enumerate(VARIANTS)}


def variant_order(r: Run) -> tuple:
    return (_ACT_ORDER.get(r.act.split("-")[0], 99), r.act, r.sizing, r.ratio, r.bias, r.multiple_of, r.label)


def tables_by_setting(runs: list[Run]) -> list[tuple[tuple, float, dict[str, list[Run]]]]:
    """One comparison per (model setting, lr): its variants (FFN labels) and their runs, the sweep's most
    common setting first."""
    groups = group_by(runs, lambda r: (r.setting, r.lr))
    order = sorted(groups, key=lambda k: (-sum(r.usable for r in groups[k]), str(k)))
    out = []
    for key in order:
        variants = group_by(sorted(groups[key], key=variant_order), lambda r: r.label)
        out.append((key[0], key[1], dict(variants)))
    return out


def _mean(values: Iterable[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return sum(xs) / len(xs) if xs else None


def _fmt(x: float | None, spec: str) -> str:
    return "–" if x is None else format(x, spec)


def variant_row(label: str, runs: list[Run]) -> list[Any]:
    r0 = runs[0]
    loss, bpb = summary_of(runs), summary_of(runs, lambda r: r.bpb)
    used = [r for r in runs if r.usable]
    dead = _mean((r.final or {}).get("dead_frac") for r in used)
    zero = _mean((r.final or {}).get("zero_frac") for r in used)
    diverged = sum(r.status == "diverged" for r in runs)
    return [label + (f" ({diverged} diverged)" if diverged else ""), r0.d_model, r0.d_ff, f"{r0.ffn_params:,}",
            f"{r0.total_params:,}", fmt_mean_std(loss), fmt_ci(loss), fmt_mean_std(bpb, 3), fmt_ci(bpb, 3), loss.n,
            _fmt(_mean(r.tokens_per_s for r in used), ",.0f"), _fmt(_mean(r.mfu for r in used), ".1%"),
            _fmt(zero, ".3f"), _fmt(dead, ".3f")]


VARIANT_HEADER = ["variant", "d_model", "d_ff", "FFN params/layer", "total params", "val loss (nats, mean ± std)",
                  "95% CI", "BPB (mean ± std)", "BPB 95% CI", "n", "tokens/s", "MFU", "zero fraction", "dead units"]


def reference_label(variants: dict[str, list[Run]]) -> str:
    """The textbook FFN when present (GELU at 4×, no bias), else ReLU at 4×, else the variant with most runs."""
    for act in ("gelu", "relu"):
        for label, runs in variants.items():
            r = runs[0]
            if r.act == act and r.budget_ratio == 4 and not r.bias and r.multiple_of == 1:
                return label
    return max(variants, key=lambda k: (sum(r.usable for r in variants[k]), k))


def paired_rows(variants: dict[str, list[Run]], ref: str) -> tuple[list[list[Any]], list[stats.Paired]]:
    rows, diffs = [], []
    base = by_seed(variants[ref])
    for label, runs in variants.items():
        if label == ref:
            continue
        d = stats.compare(base, by_seed(runs))
        diffs.append(d)
        mde = stats.minimal_detectable_effect(d.std, d.n) if d.std is not None and d.method == "paired" else None
        need = stats.seeds_needed(d.std, RESOLVE_EFFECT) if d.std is not None and d.method == "paired" else None
        rows.append([label, _fmt(d.mean, "+.4f"), fmt_ci(d, signed=True),
                     fmt_p(d.p_value), f"{d.n}{' (Welch)' if d.method == 'welch' else ''}",
                     _fmt(d.std, ".4f"), _fmt(mde, ".4f"), need if need is not None else "n/a"])
    return rows, diffs


def power_line(diffs: list[stats.Paired]) -> str:
    """The seed-to-seed noise of paired differences in this comparison, and what it lets us resolve."""
    usable = [d for d in diffs if d.method == "paired" and d.std is not None and d.n >= 2]
    if not usable:
        return ("Minimal detectable effect: n/a (fewer than 2 shared seeds; the seed variance is unknown). "
                "Run more seeds to size the effects this sweep can resolve.")
    dof = sum(d.n - 1 for d in usable)
    sd = math.sqrt(sum((d.n - 1) * d.std**2 for d in usable) / dof)  # pooled over the comparisons
    n = min(d.n for d in usable)
    mde = stats.minimal_detectable_effect(sd, n)
    need = stats.seeds_needed(sd, RESOLVE_EFFECT)
    return (f"Minimal detectable effect (paired t-test, α = 0.05, power 0.8) at the pooled SD of the per-seed "
            f"differences, {sd:.4f} nats, with n = {n} seeds: **{mde:.4f} nats**. Seeds needed to resolve "
            f"{RESOLVE_EFFECT:g} nats: **{need}**" + (f" (capped at {stats.SEEDS_CAP})" if need.capped else "") + ".")


def setting_title(setting: tuple, lr: float) -> str:
    return f"{describe_setting(setting)}, lr {lr:g}"


def results_section(runs: list[Run]) -> list[str]:
    lines = ["## Results by comparison", "",
             "Final validation loss in nats/token, bits per byte (BPB) alongside; mean ± sample std over seeds, "
             "95% t-interval of the mean, n seeds. Throughput, MFU and activation statistics are means over "
             "the finished runs (zero fraction and dead units: after training, on the validation set).", ""]
    if not runs:
        return [*lines, "No usable runs.", ""]
    for setting, lr, variants in tables_by_setting(runs):
        lines += [f"### {setting_title(setting, lr)}", ""]
        lines += table(VARIANT_HEADER, (variant_row(label, rs) for label, rs in variants.items()))
        if len(variants) > 1:
            ref = reference_label(variants)
            rows, diffs = paired_rows(variants, ref)
            lines += ["", f"Paired differences vs **{ref}** (variant − {ref}, by seed; Welch where no seeds are "
                          "shared; negative = lower loss than the reference):", ""]
            lines += table(["variant", "Δ loss (nats)", "95% CI", "p", "n", "SD of Δ", "MDE", "seeds for 0.01"],
                           rows)
            lines += ["", power_line(diffs)]
        lines.append("")
    return lines


# ---- the claims section -----------------------------------------------------------------------------------


def claims_section(results: list[ClaimResult]) -> list[str]:
    lines = ["## Claims", "",
             "Verdicts follow the stated rule of each claim; the effect is shown with its 95% interval. A verdict "
             "with fewer than two seeds is at most inconclusive. Trained effects are in nats/token of final "
             "validation loss.", ""]
    lines += table(["claim", "verdict", "effect (95% CI)", "n seeds", "rule"],
                   ([r.claim.id, f"**{r.verdict.verdict}**", r.effect or r.verdict.reason,
                     "–" if r.n is None else r.n, r.claim.rule] for r in results))
    for r in results:
        c = r.claim
        lines += ["", f"### {c.id}: {c.statement}", "",
                  f"*Source:* {c.source} · *kind:* {c.kind} · *runs:* {c.needs}", "",
                  f"**Verdict: {r.verdict.verdict}** — {r.verdict.reason}", "",
                  f"**Effect:** {r.effect or 'n/a'}" + ("" if r.n is None else f" (n = {r.n} seeds)"), "",
                  f"**Rule:** {c.rule}.", "", f"**Why:** {c.why}", ""]
        if r.details:
            lines += ["**Numbers:**", "", *r.details, ""]
        lines.append(f"**Reproduce:** `{c.command}`" + ("" if c.kind != "trained" else " then `make report`"))
    return [*lines, ""]


# ---- figures ----------------------------------------------------------------------------------------------


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed, none opened
    import matplotlib.pyplot as plt

    return plt


def _save(fig, out: Path, name: str) -> str:
    out.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    _pyplot().close(fig)
    return name


def _err(s: stats.Summary) -> float:
    """Half-width of the 95% interval for an error bar; 0 where there is none (one seed)."""
    return (s.ci_high - s.mean) if s.has_ci else 0.0


def _primary_runs(runs: list[Run]) -> list[Run]:
    """The sweep's main comparison: the most common (setting, lr)."""
    tables = tables_by_setting([r for r in runs if r.usable])
    if not tables:
        return []
    setting, lr, _ = tables[0]
    return [r for r in runs if r.setting == setting and r.lr == lr]


def _varying(keys: list[tuple]) -> list[str]:
    """Labels for lines that differ in several factors: only the factors that actually differ."""
    names = [[str(v) if k == "act" else f"{k} {v}" for k, v in key] for key in keys]
    differ = [i for i in range(len(names[0])) if len({n[i] for n in names}) > 1] if names else []
    return [", ".join(n[i] for i in differ) for n in names]


def fig_loss_vs_ratio(runs: list[Run], out: Path) -> str | None:
    series = group_by([r for r in runs if r.usable and not r.gated],
                      lambda r: (("act", r.act), ("budget", "fixed N" if r.factor("model.non_embedding_params")
                                                  else "fixed d_model"), ("lr", r.lr), ("setting", r.setting),
                                 ("bias", r.bias)))
    series = {k: group_by(v, lambda r: r.ratio) for k, v in series.items() if len({r.ratio for r in v}) >= 2}
    if not series:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    keys = sorted(series, key=str)
    for key, label in zip(keys, _varying([tuple((k, v) for k, v in key if k != "setting") for key in keys])):
        ratios = sorted(series[key])
        sums = [summary_of(series[key][x]) for x in ratios]
        ax.errorbar(ratios, [s.mean for s in sums], yerr=[_err(s) for s in sums], marker="o", capsize=3,
                    label=label or dict(key)["act"], linestyle="--" if dict(key)["budget"] == "fixed N" else "-")
    from matplotlib.ticker import ScalarFormatter

    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({x for ratios in series.values() for x in ratios}))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_xlabel("d_ff / d_model (FFN width ratio, log scale)")
    ax.set_ylabel("final validation loss (nats/token)")
    ax.set_title("Loss vs FFN width ratio (error bars: 95% CI)")
    ax.legend(fontsize=8)
    return _save(fig, out, "loss_vs_ratio.png")


def fig_loss_vs_params(runs: list[Run], out: Path) -> str | None:
    points = group_by([r for r in _primary_runs(runs) if r.usable], lambda r: (r.act, r.label))
    sizes = {rs[0].ffn_total for rs in points.values()}
    if not sizes or max(sizes) < 1.1 * min(sizes):  # matched budgets only: that is the matched-budget figure
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for act, keys in group_by(sorted(points, key=str), lambda k: k[0]).items():
        sums = [summary_of(points[k]) for k in keys]
        ax.errorbar([points[k][0].ffn_total for k in keys], [s.mean for s in sums], yerr=[_err(s) for s in sums],
                    marker="o", linestyle="none", capsize=3, label=act)
    ax.set_xscale("log")
    ax.set_xlabel("FFN parameters, all layers (log scale)")
    ax.set_ylabel("final validation loss (nats/token)")
    ax.set_title("Loss vs FFN parameters, main comparison (error bars: 95% CI)", fontsize=10)
    ax.legend(fontsize=8, ncol=2)
    return _save(fig, out, "loss_vs_ffn_params.png")


def fig_matched_budget(runs: list[Run], out: Path) -> str | None:
    primary = [r for r in _primary_runs(runs) if r.usable and r.budget_ratio is not None]
    groups = group_by(primary, lambda r: (r.budget_ratio, r.bias, r.multiple_of))
    if not groups:
        return None
    key = max(groups, key=lambda k: (len({r.act for r in groups[k]}), str(k)))
    variants = group_by(sorted(groups[key], key=variant_order), lambda r: r.act)
    if len(variants) < 2:
        return None
    sums = {act: summary_of(rs) for act, rs in variants.items()}
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 0.7 * len(sums) + 2), 4.2))
    ax.bar(list(sums), [s.mean for s in sums.values()], yerr=[_err(s) for s in sums.values()], capsize=4,
           color="tab:blue", alpha=0.8)
    low = min(s.mean - _err(s) for s in sums.values())
    high = max(s.mean + _err(s) for s in sums.values())
    pad = max(high - low, 1e-3) * 0.3
    ax.set_ylim(low - pad, high + pad)
    ax.set_xlabel("FFN variant")
    ax.set_ylabel("final validation loss (nats/token)")
    n = min(s.n for s in sums.values())
    ax.set_title(f"Matched budget {key[0]:g}× ({'bias' if key[1] else 'no bias'}), 95% CI"
                 + (" (1 seed: no interval)" if n < 2 else "") + "\ny axis does not start at 0", fontsize=10)
    _pyplot().setp(ax.get_xticklabels(), rotation=30, ha="right", fontsize=8)
    return _save(fig, out, "matched_budget.png")


def _mean_curve(runs: list[Run]) -> tuple[list[float], list[float]]:
    points: dict[float, list[float]] = defaultdict(list)
    for r in runs:
        for tokens, loss in r.curve:
            points[tokens].append(loss)
    n = max((len(v) for v in points.values()), default=0)
    xs = sorted(t for t, v in points.items() if len(v) == n)  # only where every seed has a point
    return xs, [sum(points[t]) / n for t in xs]


def fig_curves(runs: list[Run], out: Path) -> str | None:
    variants = group_by(sorted([r for r in _primary_runs(runs) if r.usable], key=variant_order), lambda r: r.label)
    curves = {label: _mean_curve(rs) for label, rs in variants.items()}
    curves = {k: v for k, v in curves.items() if len(v[0]) >= 2}
    if not curves:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for label, (xs, ys) in curves.items():
        ax.plot(xs, ys, label=label, linewidth=1.2)
    ax.set_xlabel("training tokens")
    ax.set_ylabel("validation loss (nats/token)")
    ax.set_title("Validation curves (mean over seeds)")
    ax.legend(fontsize=7, ncol=2)
    return _save(fig, out, "curves.png")


def fig_sparsity(runs: list[Run], out: Path) -> str | None:
    finished = [r for r in runs if r.status == "finished" and r.final]
    grids = group_by(finished, lambda r: (r.act, r.setting, r.bias, r.budget_ratio))
    grids = {k: v for k, v in grids.items() if len({r.lr for r in v}) >= 2}
    plt = _pyplot()
    if grids:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4))
        keys = sorted(grids, key=str)
        for key, label in zip(keys, _varying([tuple(zip(("act", "setting", "bias", "budget"), k)) for k in keys])):
            lrs = sorted({r.lr for r in grids[key]})
            for ax, stat in zip(axes, ("zero_frac", "dead_frac")):
                ys = [_mean(stat_of("final", stat)(r) for r in grids[key] if r.lr == lr) for lr in lrs]
                ax.plot(lrs, ys, marker="o", label=label or key[0])
        for ax, what in zip(axes, ("exact zeros in the hidden activation", "dead units (0 on every token)")):
            ax.set_xscale("log")
            ax.set_xlabel("learning rate")
            ax.set_ylabel("fraction (after training)")
            ax.set_title(what.capitalize(), fontsize=10)
            ax.set_ylim(-0.02, 1.02)
            ax.legend(fontsize=7)
        return _save(fig, out, "sparsity_vs_lr.png")
    variants = group_by(sorted([r for r in _primary_runs(finished)], key=variant_order), lambda r: r.label)
    if not variants:
        return None
    fig, ax = plt.subplots(figsize=(max(6.0, 0.8 * len(variants) + 2), 4.2))
    width = 0.27
    for i, (block, stat, name) in enumerate((("init", "zero_frac", "zeros at init"),
                                             ("final", "zero_frac", "zeros after training"),
                                             ("final", "dead_frac", "dead units after training"))):
        ys = [_mean(stat_of(block, stat)(r) for r in rs) or 0.0 for rs in variants.values()]
        ax.bar([j + (i - 1) * width for j in range(len(variants))], ys, width=width, label=name)
    ax.set_xticks(range(len(variants)), list(variants), rotation=30, ha="right", fontsize=8)
    ax.set_xlabel("FFN variant")
    ax.set_ylabel("fraction of hidden activations / units")
    ax.set_title("Hidden-activation sparsity per variant")
    ax.legend(fontsize=8)
    return _save(fig, out, "sparsity.png")


def fig_throughput(runs: list[Run], out: Path) -> str | None:
    variants = group_by(sorted([r for r in _primary_runs(runs) if r.usable and r.tokens_per_s], key=variant_order),
                        lambda r: r.label)
    if not variants:
        return None
    sums = {label: stats.summarize(r.tokens_per_s for r in rs) for label, rs in variants.items()}
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5.0, 0.7 * len(sums) + 2), 4.2))
    ax.bar(list(sums), [s.mean for s in sums.values()], yerr=[s.std or 0.0 for s in sums.values()], capsize=4)
    ax.set_xlabel("FFN variant")
    ax.set_ylabel("training throughput (tokens/s)")
    ax.set_title("Throughput per variant (error bars: std over seeds)")
    _pyplot().setp(ax.get_xticklabels(), rotation=30, ha="right", fontsize=8)
    return _save(fig, out, "throughput.png")


FIGURES: tuple[tuple[str, Callable[[list[Run], Path], str | None]], ...] = (
    ("Loss vs FFN width ratio, per activation (C1)", fig_loss_vs_ratio),
    ("Loss vs FFN parameters", fig_loss_vs_params),
    ("Matched-budget comparison with 95% CIs (C3, C4, C8, C13)", fig_matched_budget),
    ("Validation curves", fig_curves),
    ("Zero fraction and dead units (C5, C6)", fig_sparsity),
    ("Throughput per variant (C7, C9)", fig_throughput),
)


def draw_figures(runs: list[Run], out: Path) -> list[tuple[str, str]]:
    """(caption, file name) of every figure whose data exists; stale figures from an earlier report go."""
    if out.exists():
        for old in out.glob("*.png"):
            old.unlink()
    drawn = []
    for caption, draw in FIGURES:
        name = draw(runs, out)
        if name:
            drawn.append((caption, name))
    return drawn


# ---- provenance and summary -------------------------------------------------------------------------------


def _distinct(values: Iterable[Any]) -> str:
    counts = Counter(v for v in values if v not in (None, "", {}))
    return "; ".join(f"{v} ({n} runs)" if len(counts) > 1 else str(v) for v, n in counts.most_common()) or "unknown"


def provenance_section(loaded: Loaded, source_arg: str, out_dir: Path | None = None) -> list[str]:
    recs = [r.record for r in loaded.runs]
    git = _distinct(f"{(g := rec.get('git') or {}).get('revision') or 'unknown'}"
                    + (" (uncommitted changes)" if g.get("dirty") else "") for rec in recs)
    packages = sorted({k for rec in recs for k in (rec.get("versions") or {})})
    versions = ", ".join(f"{p} {_distinct((rec.get('versions') or {}).get(p) for rec in recs)}" for p in packages)
    hardware = _distinct(" · ".join(str(x) for x in (h.get("accelerator"), h.get("gpu") or h.get("cpu"),
                                                     f"{h.get('devices', 1)} device(s)", h.get("precision")) if x)
                         for rec in recs if (h := rec.get("hardware") or {}))
    tokens = sum(rec.get("tokens") or 0 for rec in recs)
    flops = sum((rec.get("flops") or {}).get("total_training") or 0 for rec in recs)
    wall = sum(rec.get("wall_time_s") or 0 for rec in recs)
    m = loaded.manifest or {}
    lines = ["## Provenance", "",
             f"- source: `{loaded.source}`; rebuild this report with `python -m ffnbench.report {source_arg}`"
             + (f"; this copy rebuilds from its own results with `python -m ffnbench.report "
                f"{out_dir / RESULTS_FILE}`" if out_dir is not None and out_dir / RESULTS_FILE != Path(source_arg)
                else ""),
             f"- sweep: experiment `{m.get('experiment', 'unknown')}`, command `{m.get('command', 'unknown')}`, "
             f"started {m.get('started_at', 'unknown')}" if m else "- sweep: no sweep.json (command unknown)"]
    if m.get("train_command"):
        train = str(m["train_command"])
        lines.append(f"- training command: `{'python ' + train if train.startswith('-m ') else train}`")
    lines += [f"- git commit(s): {git}", f"- package versions: {versions or 'unknown'}", f"- hardware: {hardware}",
              f"- totals over the {len(recs)} runs used (finished and diverged): {tokens:,} training tokens, "
              f"{flops:.3g} training FLOPs (analytic: 6·N plus attention, per token), {wall:,.0f} s "
              f"({wall / 3600:.2f} h) of training wall time", ""]
    return lines


def unused_section(loaded: Loaded) -> list[str]:
    diverged = [Unused(r.name, r.status, f"diverged: {_first_line(r.error)} — excluded from the loss statistics, "
                                         "counted in the stability checks (C4) and kept in results.jsonl")
                for r in loaded.runs if r.status == "diverged"]
    rows = sorted([*loaded.unused, *diverged], key=lambda u: u.run)
    lines = ["## Runs not used", ""]
    if not rows:
        return [*lines, "None: every run of the sweep finished and is in the statistics.", ""]
    return [*lines, *table(["run", "status", "reason"], ([u.run, u.status, u.reason] for u in rows)), ""]


def summary_paragraph(loaded: Loaded, results: list[ClaimResult]) -> str:
    usable = [r for r in loaded.runs if r.usable]
    if not usable:
        return (f"No usable runs in `{loaded.source}` ({len(loaded.unused)} not used, listed below). Only the "
                "analytic claims can be judged.")
    cfg = usable[0].record["config"]
    seeds = sorted({r.seed for r in usable})
    counts = Counter(r.verdict.verdict for r in results)
    tokens = sorted({r.record.get("tokens") or 0 for r in usable})
    experiment = (loaded.manifest or {}).get("experiment", cfg.get("name"))
    text = (f"{len(usable)} finished runs of {len({(r.label, r.setting, r.lr) for r in usable})} variants "
            f"(seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}) from the `{experiment}` sweep "
            f"on {cfg['data'].get('source')} "
            f"({cfg['data'].get('tokenizer')} tokens), "
            f"{' / '.join(f'{t:,}' for t in tokens)} training tokens per run; "
            f"{len(loaded.runs) - len(usable)} diverged and {len(loaded.unused)} other runs not used. "
            f"Of the 13 claims, {counts['supported']} are supported, {counts['contradicted']} contradicted and "
            f"{counts['inconclusive']} inconclusive. Loss is the final validation loss in nats/token, with bits per "
            "byte alongside.")
    if len(seeds) < 2:
        text += (" **One seed only:** no confidence intervals (the CI columns say n/a), and no trained claim can be "
                 "more than inconclusive; rerun with more seeds (ARGS=\"seed=0,1,2\").")
    return text


# ---- the report -------------------------------------------------------------------------------------------


def slim(record: dict) -> dict:
    return {k: record[k] for k in KEEP if k in record}


def write_results(runs: list[Run], path: Path) -> None:
    with atomic_file(path) as f:
        for r in sorted(runs, key=lambda r: r.name):
            # NaN → null, as result.json
            f.write((json.dumps(json_safe(slim(r.record)), allow_nan=False) + "\n").encode())


def render(loaded: Loaded, results: list[ClaimResult], figures: list[tuple[str, str]], source_arg: str,
           out_dir: Path | None = None) -> str:
    title = (loaded.manifest or {}).get("experiment") or (loaded.runs[0].record["config"].get("name")
                                                          if loaded.runs else loaded.source.name)
    lines = [f"# ffnbench report: {title}", "", summary_paragraph(loaded, results), ""]
    lines += claims_section(results)
    lines += results_section(loaded.runs)
    lines += ["## Figures", ""]
    lines += [f"![{caption}]({FIGURES_DIR}/{name})\n\n*{caption}* (`{FIGURES_DIR}/{name}`)\n"
              for caption, name in figures]
    if not figures:
        lines += ["No figure: no run has the data one needs.", ""]
    lines += unused_section(loaded)
    lines += provenance_section(loaded, source_arg, out_dir)
    lines.append(f"*Generated {time.strftime('%Y-%m-%d %H:%M:%S %z')} by ffnbench.report.*")
    return "\n".join(lines) + "\n"


def build(loaded: Loaded, out_dir: Path, source_arg: str,
          bench_files: Iterable[Path] | None = None) -> tuple[Path, list[ClaimResult]]:
    out_dir.mkdir(parents=True, exist_ok=True)
    results = evaluate_claims(loaded.runs, bench_files)
    figures = draw_figures(loaded.runs, out_dir / FIGURES_DIR)
    write_results(loaded.runs, out_dir / RESULTS_FILE)
    if loaded.manifest and not (out_dir / SWEEP_MANIFEST).exists():  # a published copy keeps its sweep's command
        write_json_atomic(out_dir / SWEEP_MANIFEST, loaded.manifest)
    path = out_dir / REPORT_FILE
    with atomic_file(path) as f:
        f.write(render(loaded, results, figures, source_arg, out_dir).encode())
    return path, results


def write_report(sweep: Path, out_dir: Path | None = None, bench_files: Iterable[Path] | None = None) -> Path:
    """Read a sweep directory (or a results.jsonl), and write REPORT.md, results.jsonl and figures/ into
    `out_dir` (default: the sweep directory, or the folder holding the results.jsonl). Returns REPORT.md."""
    sweep = Path(sweep)
    loaded = load(sweep)
    out = Path(out_dir) if out_dir is not None else (sweep.parent if sweep.is_file() else sweep)
    return build(loaded, out, str(sweep), bench_files)[0]


def latest_sweep(root: Path = RUNS_ROOT) -> Path:
    """The most recently started sweep: the newest <root>/*/sweep.json."""
    manifests = list(Path(root).glob(f"*/{SWEEP_MANIFEST}"))
    if not manifests:
        raise FFNBenchError(f"no sweep found under {root}/ (no {root}/*/{SWEEP_MANIFEST}); run one with "
                            "`make sweep`, or name a sweep directory: `make report SWEEP=<dir>`")

    def started(p: Path) -> tuple:
        return (str((_read_manifest(p.parent) or {}).get("started_at") or ""), p.stat().st_mtime)

    return max(manifests, key=started).parent


# ---- Weights & Biases -------------------------------------------------------------------------------------

WANDB_STATES = {"finished": "finished", "running": "running", "crashed": "failed", "failed": "failed",
                "killed": "failed"}


def check_wandb_online() -> None:
    """Fail at once, with the fix, wherever the W&B API cannot answer: offline mode, no credentials, or no
    route to the server (a short socket probe, so an offline machine does not sit in the client's retries)."""
    from urllib.parse import urlparse

    from ffnbench.loggers import has_wandb_credentials
    from ffnbench.tokenizer import unreachable

    mode = os.environ.get("WANDB_MODE", "").lower()
    if mode in ("offline", "disabled", "dryrun"):
        raise FFNBenchError(f"--wandb reads runs through the W&B API, but WANDB_MODE={mode}: unset it and log in "
                            "(`wandb login`), or build the report from disk: `make report SWEEP=<dir>`")
    if not has_wandb_credentials():
        raise FFNBenchError("--wandb: no W&B credentials (set WANDB_API_KEY or run `wandb login`); or build the "
                            "report from disk: `make report SWEEP=<dir>`")
    host = urlparse(os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    why = unreachable(host)
    if why:
        raise FFNBenchError(f"--wandb: {host} is unreachable ({why}); build the report from disk instead: "
                            "`make report SWEEP=<dir>`")


def record_from_wandb(run: Any) -> dict:
    """A W&B run (its config is the resolved Hydra config, its summary the metrics train.py logs) in the shape
    of result.json, as far as W&B holds it; sizes are recomputed from the config with ffnbench's accounting."""
    from ffnbench.accounting import count_params
    from ffnbench.config import model_config
    from ffnbench.ffn import size_ffn
    from ffnbench.tokenizer import vocab_size_for

    config, summary = dict(run.config), dict(run.summary)
    mcfg = model_config(config, vocab_size_for(config["data"]))
    tokens_per_step = int(config["data"]["batch_size"]) * mcfg.seq_len
    curve = [{"step": int(row["trainer/global_step"]), "tokens": int(row["trainer/global_step"]) * tokens_per_step,
              "val_loss": row.get("val/loss"), "val_bpb": row.get("val/bpb")}
             for row in run.scan_history(keys=["val/loss", "val/bpb", "trainer/global_step"])]
    final_stats = {k: summary.get(f"final/ffn_{k}") for k in ("zero_frac", "dead_frac", "never_positive_frac")}
    return {
        "schema": 1, "status": summary.get("status") or WANDB_STATES.get(run.state, "failed"),
        "name": config.get("name"), "run_name": run.name, "seed": config.get("seed"), "config": config,
        "ffn": ffn_record(mcfg.ffn, size_ffn(mcfg.ffn, mcfg.d_model)),
        "model": model_record(mcfg, config["model"].get("name")),
        "params": count_params(mcfg).as_dict(),
        "metrics": {k: summary.get(summary_key(k)) for k in METRICS},
        "ffn_stats": {"init": None, "final": {"mean": final_stats}},
        "curve": curve, "tokens": summary.get("tokens"),
        "throughput": {"tokens_per_s": summary.get("perf/tokens_per_s"), "mfu": summary.get("perf/mfu")},
        "git": {"revision": (run.metadata or {}).get("git", {}).get("commit")},
    }


def load_wandb(path: str, group: str | None) -> Loaded:
    check_wandb_online()
    import wandb

    try:
        api_runs = wandb.Api(timeout=30).runs(path, filters={"group": group} if group else None)
        loaded = Loaded([], [], Path(f"wandb:{path}" + (f"/{group}" if group else "")))
        for run in api_runs:
            try:
                _add(loaded, classify(record_from_wandb(run), run.name))
            except (FFNBenchError, KeyError, TypeError, ValueError) as e:
                loaded.unused.append(Unused(run.name, str(run.state), f"cannot map this W&B run ({e})"))
    except wandb.errors.CommError as e:
        raise FFNBenchError(f"--wandb {path}: the W&B API failed ({e})") from None
    if not loaded.runs and not loaded.unused:
        raise FFNBenchError(f"--wandb {path}: no runs" + (f" in group {group!r}" if group else ""))
    return checked(loaded)


def create_wandb_report(path: str, group: str | None, results: list[ClaimResult]) -> str:
    """A W&B report with the same panels as REPORT.md's figures, over the project's runs (grouped by FFN)."""
    _require_workspaces()
    import wandb_workspaces.reports.v2 as wr

    entity, project = path.split("/", 1)
    runset = wr.Runset(entity=entity, project=project, name=group or project,
                       filters=f"Config('name') == '{group}'" if group else None, groupby=["config.ffn.act"])
    verdicts = "\n".join(f"- **{r.claim.id}** {r.verdict.verdict}: {r.effect or r.verdict.reason}" for r in results)
    report = wr.Report(entity=entity, project=project, title=f"ffnbench: {group or project}",
                       description="FFN claims tested by ffnbench", blocks=[
                           wr.H1("Claims"), wr.MarkdownBlock(text=verdicts),
                           wr.PanelGrid(runsets=[runset], panels=[
                               wr.LinePlot(title="Validation curves", x="tokens", y=["val/loss"]),
                               wr.ScatterPlot(title="Loss vs FFN params", x="params/ffn_per_layer",
                                              y="final/final_val_loss"),
                               wr.BarPlot(title="Matched-budget loss", metrics=["final/final_val_loss"]),
                               wr.BarPlot(title="Zero fraction / dead units",
                                          metrics=["final/ffn_zero_frac", "final/ffn_dead_frac"]),
                               wr.BarPlot(title="Throughput", metrics=["perf/tokens_per_s"]),
                           ])])
    report.save()
    return str(report.url)


# ---- command line -----------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="ffnbench report", description="Statistics over seeds and a verdict per "
                                     "claim for a sweep: REPORT.md, results.jsonl and figures/*.png.")
    parser.add_argument("source", nargs="?", help="a sweep directory or a results.jsonl (default: the newest "
                                                  f"{RUNS_ROOT}/*/{SWEEP_MANIFEST})")
    parser.add_argument("--out", type=Path, help="where to write REPORT.md, results.jsonl and figures/")
    parser.add_argument("--wandb", metavar="ENTITY/PROJECT", help="read the runs from this W&B project")
    parser.add_argument("--group", help="with --wandb: only this group (the sweep's name)")
    parser.add_argument("--wandb-report", action="store_true", help="also create a W&B report (needs --wandb)")
    ns = parser.parse_args(argv)
    if ns.wandb and ns.source:
        parser.error("give a sweep directory/results.jsonl or --wandb, not both")
    if (ns.wandb_report or ns.group) and not ns.wandb:
        parser.error("--wandb-report and --group need --wandb ENTITY/PROJECT")
    if ns.wandb and "/" not in ns.wandb:
        parser.error("--wandb takes ENTITY/PROJECT")
    return ns


@user_errors_exit
def main(argv: list[str] | None = None) -> None:
    ns = parse_args(sys.argv[1:] if argv is None else argv)
    if ns.wandb:
        if ns.wandb_report:
            _require_workspaces()  # before anything slow: a missing package is the first thing to say
        loaded = load_wandb(ns.wandb, ns.group)
        name = f"wandb-{ns.wandb.replace('/', '-')}" + (f"-{ns.group}" if ns.group else "")
        report, results = build(loaded, ns.out or RUNS_ROOT / name,
                                f"--wandb {ns.wandb}" + (f" --group {ns.group}" if ns.group else ""))
        print(f"report: {report}")
        if ns.wandb_report:
            print(f"W&B report: {create_wandb_report(ns.wandb, ns.group, results)}")
        return
    source = Path(ns.source) if ns.source else latest_sweep()
    print(f"report: {write_report(source, ns.out)}")


def _require_workspaces() -> None:
    if importlib.util.find_spec("wandb_workspaces") is None:
        raise FFNBenchError("--wandb-report needs the wandb-workspaces package, which is not installed: "
                            "`pip install 'ffnbench[wandb-reports]'`")


if __name__ == "__main__":
    main()
