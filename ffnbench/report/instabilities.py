"""REPORT.md's "Instabilities" section, and each run's instabilities (ffnbench.runs.instability): as its record holds
them, or, for a record written before they were recorded, recounted from its curves with the thresholds of its
config (the defaults where it names none) and the unigram loss of its corpus (computed from the corpus, which
`ffnbench.data` prepares offline for the local sources, when the record does not hold it)."""

from __future__ import annotations

import functools
import math
import os
from collections import Counter
from pathlib import Path

import numpy as np

from ffnbench.claims import Run, describe_setting, group_by
from ffnbench.report.comparisons import variant_order
from ffnbench.runs.instability import KINDS, Instability, Thresholds, detect, failed_to_learn
from ffnbench.tables import markdown_table


@functools.cache
def _corpus_unigram(data_json: str) -> float | None:
    """The unigram loss of a record's corpus, from its data config (JSON, to be hashable); None when the corpus
    cannot be had here (a hub source offline)."""
    import json

    from ffnbench.data.cache import prepare_corpus, train_unigram_loss
    from ffnbench.errors import FFNBenchError

    config = json.loads(data_json)
    # the record's cache_dir is the machine's that trained it: this machine's own default holds the same tokens
    config["cache_dir"] = os.environ.get("FFNBENCH_CACHE") or str(Path.home() / ".cache" / "ffnbench")
    try:
        tok_dir, metas, _ = prepare_corpus(config)
    except (FFNBenchError, OSError, ImportError):
        return None
    tokens = np.memmap(tok_dir / "train.bin", mode="r", dtype=metas["train"]["dtype"])
    return train_unigram_loss(tok_dir, tokens, int(tokens.max()) + 1, metas["train"])


def unigram_of(r: Run) -> float | None:
    """The unigram loss of the run's training split, nats/token."""
    import json

    value = (r.result.data or {}).get("unigram_loss")
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    data = (r.result.config or {}).get("data")
    return _corpus_unigram(json.dumps(data, sort_keys=True)) if data else None


@functools.cache
def instabilities(r: Run) -> tuple[Instability, ...]:
    """The run's instabilities: recorded, or recounted (module docstring). A record written before no_learning
    existed has it judged from its own numbers (instability.failed_to_learn)."""
    recorded = r.result.instabilities
    if recorded is not None:
        found = [Instability.from_dict(i) for i in recorded]
        if failed_to_learn(r.result) and not any(i.kind == "no_learning" for i in found):
            found.append(Instability("no_learning", int(r.result.steps or 0), r.loss, recovered=False))
        return tuple(sorted(found, key=lambda i: (i.step, KINDS.index(i.kind))))
    cfg = r.result.config or {}
    train = r.result.train_curve
    vocab = (r.result.model or {}).get("vocab_size")
    return tuple(detect(
        # a NaN that appeared only in validation is a divergence; a run that did not learn is detect()'s to name
        status="diverged" if r.diverged and not r.no_learning else r.status, steps=r.result.steps,
        val_curve=[(int(p["step"]), float("nan") if p.get("val_loss") is None else float(p["val_loss"]))
                   for p in r.result.curve or []],
        train_curve=None if train is None else [(int(s), float("nan") if v is None else float(v)) for s, v in train],
        unigram_loss=unigram_of(r), warmup_steps=int((cfg.get("optim") or {}).get("warmup_steps") or 0),
        thresholds=Thresholds.from_config(cfg.get("instability")), final_loss=r.loss,
        uniform_loss=math.log(vocab) if isinstance(vocab, int) and vocab > 1 else None))


def kinds_of(r: Run) -> set[str]:
    return {i.kind for i in instabilities(r)}


def instability_section(runs: list[Run]) -> list[str]:
    """Per variant, setting and lr with an instability: how many of its runs had each kind (diverged, plateau,
    spike, and no_learning where a run had it), tuning and judged runs alike; nothing when no run had one."""
    groups = group_by(sorted(runs, key=lambda r: (str(r.setting), variant_order(r), r.lr)),
                      lambda r: (r.label, r.setting, r.lr))
    # no_learning's column and rule only where a run did not learn: the reports of sweeps without one read as before
    shown = [k for k in KINDS if k != "no_learning" or any(k in kinds_of(r) for r in runs)]
    rows = []
    for (label, setting, lr), group in groups.items():
        counts = Counter(k for r in group for k in kinds_of(r))
        if not counts:
            continue
        rows.append([label, describe_setting(setting), f"{lr:g}", len(group), *(counts.get(k, 0) or "" for k in shown),
                     "; ".join(f"s{r.seed}: " + ", ".join(i.describe() for i in instabilities(r))
                               for r in group if instabilities(r))])
    total = sum(bool(instabilities(r)) for r in runs)
    thresholds = {Thresholds.from_config((r.result.config or {}).get("instability")) for r in runs}
    rule = "; ".join(t.describe() + ("; " + t.describe_no_learning() if "no_learning" in shown else "")
                     for t in (thresholds or {Thresholds()}))
    lines = ["## Instabilities", "",
             f"{total} of {len(runs)} runs had an instability ({rule}). A run that had one stays in every statistic: "
             "it is an outcome of its variant at its lr.", ""]
    if rows:
        lines += markdown_table(["variant", "setting", "lr", "runs", *shown, "which"], rows)
        lines.append("")
    return lines
