"""A run as the claims see it, and the per-seed statistics every claim takes of a set of runs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ffnbench.claims.band import in_band
from ffnbench.runs.instability import failed_to_learn
from ffnbench.runs.result import RunResult, finite
from ffnbench.stats.intervals import Summary, summarize

# The model factors a run's setting names: runs that agree on all of them are comparable.
MODEL_FACTORS = ("name", "d_model", "n_layer", "n_head", "seq_len", "non_embedding_params", "ffn_init", "init",
                 "init_gain", "qk_norm")
# The factors outside the model a setting names too: the training length and the stability options.
RUN_FACTORS = (("trainer", "tokens_per_param"), ("optim", "z_loss"))

# The nuisance factors' defaults (a setting names the ones it changes, describe_setting); a claim is decided where
# the other nuisance factors are at their default and the init lies in the practice band (is_reference).
REFERENCE = {"model.init": "gpt2", "model.init_gain": 1.0, "model.ffn_init": "gpt2", "model.qk_norm": False,
             "optim.z_loss": 0.0}

Setting = tuple[tuple[str, Any], ...]  # (("model.name", "small"), ...): hashable, in MODEL_FACTORS order


@dataclass(frozen=True, eq=False)  # a run is itself: compared and hashed by identity
class Run:
    """What the claims and the report need from one run's record (finished or diverged)."""

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
    setting: Setting  # the studied model factors as configured
    loss: float | None  # final validation loss, nats/token
    bpb: float | None
    init: dict | None  # ffn_stats.init.mean: zero_frac, dead_frac, never_positive_frac
    final: dict | None
    tokens_per_s: float | None
    mfu: float | None
    curve: tuple  # ((tokens, val_loss), ...), finite points only
    error: str | None
    result: RunResult = field(repr=False)  # the whole record it was read from
    # "tuning": run only to choose an lr (config `tuning: true`), never judged; "judged": everything else, but
    # "neighbour" (set by lr_protocol.mark_neighbours) for a judged run at a neighbour of its chosen lr.
    role: str = "judged"
    # finished without learning (runs.instability.failed_to_learn: above ln V, or still at the unigram loss past
    # warmup): a failure of its variant at its lr, like a divergence, never a loss that passes for noise
    no_learning: bool = False

    @classmethod
    def from_result(cls, result: RunResult) -> Run:
        """KeyError/TypeError/ValueError when a field the analysis needs is missing or malformed."""
        ffn, cfg = result.ffn, result.config
        thr = result.throughput
        act = ffn["act"] + ("-tanh" if ffn.get("approximate") == "tanh" else "")
        return cls(
            name=str(result.run_name or Path(str(result.run_dir or "?")).name),
            status=result.status,
            seed=int(result.seed),
            act=act,
            gated=bool(ffn["gated"]),
            sizing=ffn["sizing"],
            ratio=float(ffn["ratio"]),
            bias=bool(ffn["bias"]),
            multiple_of=int(ffn.get("multiple_of", 1)),
            label=ffn["label"],
            d_model=int(result.model["d_model"]),
            d_ff=int(ffn["d_ff"]),
            ffn_params=int(ffn["params_per_layer"]),
            ffn_total=int(result.params["ffn_total"]),
            total_params=int(result.params["total"]),
            budget_mismatch=float(ffn.get("budget_mismatch") or 0.0),
            max_mismatch=float(cfg["ffn"]["max_mismatch"]),
            lr=float(cfg["optim"]["lr"]),
            setting=(*((f"model.{k}", cfg["model"].get(k)) for k in MODEL_FACTORS),
                     *((f"{g}.{k}", cfg.get(g, {}).get(k)) for g, k in RUN_FACTORS)),
            loss=result.metric("final_val_loss"),
            bpb=result.metric("final_val_bpb"),
            init=(result.ffn_stats.get("init") or {}).get("mean"),
            final=(result.ffn_stats.get("final") or {}).get("mean"),
            tokens_per_s=thr.get("tokens_per_s") if finite(thr.get("tokens_per_s")) else None,
            mfu=thr.get("mfu") if finite(thr.get("mfu")) else None,
            curve=tuple((p["tokens"], p["val_loss"]) for p in result.curve or [] if finite(p.get("val_loss"))),
            error=result.error,
            result=result,
            role="tuning" if cfg.get("tuning") is True else "judged",
            no_learning=failed_to_learn(result),
        )

    @classmethod
    def from_record(cls, record: dict) -> Run:
        """A run from a result.json / results.jsonl record as JSON data (CorruptRecord if it is not one)."""
        return cls.from_result(RunResult.from_json(record))

    @property
    def usable(self) -> bool:
        """Counts in the loss statistics: finished, with a finite final validation loss, having learned."""
        return self.status == "finished" and self.loss is not None and not self.no_learning

    @property
    def diverged(self) -> bool:
        """Counts as a failure in every comparison: diverged in training, "finished" without a finite validation loss
        (a NaN that appeared only in validation), or finished without learning."""
        return self.status == "diverged" or (self.status == "finished" and (self.loss is None or self.no_learning))

    @property
    def budget_ratio(self) -> float | None:
        """The ungated ratio whose parameter count this FFN has. An ungated FFN sized by budget r is the same
        model as one sized by width r; a gated FFN sized by width matches no budget."""
        return self.ratio if (self.sizing == "budget" or not self.gated) else None

    def factor(self, key: str) -> Any:
        """One model factor of the setting, e.g. run.factor("model.n_layer")."""
        return dict(self.setting)[key]


def is_reference(setting: Setting) -> bool:
    """Whether a setting is one a verdict is decided in: its init in the practice band (claims.band) and every other
    nuisance factor at its default (REFERENCE; absent counts as it)."""
    s = dict(setting)
    return in_band(setting) and all(s.get(k, v) in (v, None) for k, v in REFERENCE.items() if k not in INIT_FACTORS)


def setting_without(setting: Setting, *keys: str) -> Setting:
    """`setting` without the factors `keys`."""
    return tuple((k, v) for k, v in setting if k not in keys)


INIT_FACTORS = ("model.init", "model.init_gain")  # what "the init" of a setting is: the convention and its gain


def init_name(setting: Setting) -> str:
    """The setting's init in a word: gpt2, fan_in, or scaled with its gain ('scaled 0.55')."""
    s = dict(setting)
    init = s.get("model.init") or REFERENCE["model.init"]
    return f"{init} {float(s.get('model.init_gain') or 1.0):g}" if init == "scaled" else str(init)


def short_setting(setting: Setting, named: bool = True) -> str:
    """A setting in a table cell's few words: 'mini d64 4L, 6 tok/p, fan_in', and what else differs from the default
    ('fixed params', 'matched FFN init', 'qk-norm', 'z-loss'); named=False leaves out the model's name, for a figure's
    legend: 'd64 4L, 6 tok/p, fan_in'."""
    s = dict(setting)
    words = [(f"{s.get('model.name')} " if named else "") + f"d{s.get('model.d_model')} {s.get('model.n_layer')}L"
             + (" fixed params" if s.get("model.non_embedding_params") else "")]
    if s.get("trainer.tokens_per_param") is not None:
        words.append(f"{s['trainer.tokens_per_param']:g} tok/p")
    words.append(init_name(setting))
    if s.get("model.ffn_init") not in (None, REFERENCE["model.ffn_init"]):
        words.append(f"{s['model.ffn_init']} FFN init")
    words += [word for key, word in (("model.qk_norm", "qk-norm"), ("optim.z_loss", "z-loss")) if s.get(key)]
    return ", ".join(words)


def describe_setting(setting: Setting) -> str:
    """The setting in words: 'small (d_model 64, 2 layers)', or the fixed budget it was solved for; an FFN
    initialisation other than the default is named ('..., matched FFN init')."""
    s = dict(setting)
    name, layers = s.get("model.name") or "model", s.get("model.n_layer")
    text = f"{name} (d_model {s.get('model.d_model')}, {layers} layers"
    budget = s.get("model.non_embedding_params")
    if budget:
        size = (f"the non-embedding params of its d_model {s.get('model.d_model')} model" if budget == "reference"
                else f"a fixed {float(budget):.3g} non-embedding params")
        text = f"{name} at {size} ({layers} layers; d_model solved per FFN"
    init = s.get("model.ffn_init")
    if init is not None and init != REFERENCE["model.ffn_init"]:
        text += f", {init} FFN init"
    if s.get("model.init") not in (None, REFERENCE["model.init"]):
        text += f", {init_name(setting)} init"
    if s.get("model.qk_norm"):
        text += ", qk-norm"
    if s.get("optim.z_loss"):
        text += f", z-loss {s['optim.z_loss']:g}"
    if s.get("trainer.tokens_per_param") is not None:
        text += f", {s['trainer.tokens_per_param']:g} tokens/param"
    return text + ")"


def group_by(runs: Iterable[Run], key: Callable[[Run], Any]) -> dict[Any, list[Run]]:
    """The runs by key(run), keys in order of first appearance."""
    out: dict[Any, list[Run]] = defaultdict(list)
    for r in runs:
        out[key(r)].append(r)
    return out


def run_by_seed(runs: Iterable[Run], keep: Callable[[Run], bool] = lambda r: r.usable) -> dict[int, Run]:
    """{seed: run} over the runs `keep` accepts, one per seed. Width-sized runs come first, so where an
    ungated width-r and budget-r run (the same model) share a seed, the width run is the one used."""
    out: dict[int, Run] = {}
    for r in sorted(runs, key=lambda r: (r.sizing != "width", r.name)):
        if keep(r) and r.seed not in out:
            out[r.seed] = r
    return out


def by_seed(runs: Iterable[Run], value: Callable[[Run], float | None] = lambda r: r.loss) -> dict[int, float]:
    """{seed: value} over the usable runs (one per seed, see run_by_seed)."""
    chosen = run_by_seed(runs, lambda r: r.usable and value(r) is not None)
    return {s: value(r) for s, r in chosen.items()}  # type: ignore[misc]


def outcomes_by_seed(runs: Iterable[Run]) -> dict[int, Run]:
    """{seed: run} over the runs with an outcome: finished with a loss, or diverged (see run_by_seed)."""
    return run_by_seed(runs, lambda r: r.usable or r.diverged)


def summary_of(runs: Iterable[Run], value: Callable[[Run], float | None] = lambda r: r.loss) -> Summary:
    """Mean, std and 95% CI of `value` over the seeds (one value per seed, see by_seed)."""
    return summarize(by_seed(runs, value).values())


def stat_of(which: str, key: str) -> Callable[[Run], float | None]:
    """A getter for one FFN activation statistic (zero_frac, dead_frac, never_positive_frac) of a run, at
    init or after training (final)."""

    def get(r: Run) -> float | None:
        block = r.init if which == "init" else r.final
        value = (block or {}).get(key)
        return float(value) if finite(value) else None

    return get


def per_seed_mean(runs: Iterable[Run], value: Callable[[Run], float | None]) -> dict[int, float]:
    """One number per seed (the mean over that seed's finished runs): runs that share a seed share their
    initialisation, so they are not independent samples of it."""
    groups: dict[int, list[float]] = defaultdict(list)
    for r in runs:
        v = value(r)
        if v is not None and r.usable:
            groups[r.seed].append(v)
    return {s: sum(vs) / len(vs) for s, vs in groups.items()}
