"""From Hydra configs (conf/) to the objects that are built from them, and the run-name resolver.

The one place that reads `cfg.ffn` / `cfg.model` into an `FFNSpec` / `ModelConfig`, so the trainer, the
`params` command and the sweep dry-run all agree on what a config means."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ffnbench.errors import ConfigError
from ffnbench.ffn import FFNSpec, size_ffn
from ffnbench.model import ModelConfig

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
DEFAULT_BUDGET = 4.0  # the sizing a variant gets when neither ffn.width nor ffn.budget is given

# Settings that change where or how a run is observed, not what it computes. Two runs that differ only in
# these are the same run: a sweep may resume one from the other's checkpoint.
NON_IDENTITY_KEYS = (
    "run_dir",
    "name",
    "runs_root",
    "logger",
    "slurm",
    "data.cache_dir",
    "data.num_proc",
    "trainer.progress_bar",
    "trainer.log_every",
    "trainer.compile",
    "trainer.devices",
    "trainer.num_nodes",
    "trainer.strategy",
    "trainer.accelerator",
    "trainer.peak_flops",
    "trainer.ckpt_every",
    "hydra",
)


# The overrides a run's directory name leaves out: the FFN and the seed (the name's label says them) and
# whatever does not change what a run computes (NON_IDENTITY_KEYS). Hydra reads this list through the
# `name_exclude_keys` resolver (conf/train.yaml: hydra.job.config.override_dirname.exclude_keys).
# trainer.compile stays in the name: it may resume an eager run, but asked for by name it is a run of its own.
NAME_EXCLUDE_KEYS = ("seed", "experiment", "ffn", "ffn.act", "ffn.width", "ffn.budget", "ffn.bias",
                     "ffn.multiple_of", "ffn.approximate", "trainer",
                     *(k for k in NON_IDENTITY_KEYS if k != "trainer.compile"))
MAX_NAME_EXTRAS = 80  # longer override lists are replaced by a hash: file names have limits


def run_name(act, width, budget, bias, multiple_of, approximate, seed, override_dirname="") -> str:
    """The directory name of a run: what its FFN is, any other overrides, and its seed —
    e.g. `swiglu-b4-nobias-s0` or `gelu-w4-bias-optim.lr=0.003-s1`. Never a timestamp, so a rerun of the
    same sweep finds its runs again."""
    try:
        spec = ffn_spec({"act": act, "width": width, "budget": budget, "bias": bias,
                         "multiple_of": multiple_of, "approximate": approximate})
        label = spec.label
    except ConfigError:
        label = f"{act}-invalid"  # the run itself reports the error; the name only has to exist
    extras = str(override_dirname or "").replace("/", "_").replace(",", "-").replace(" ", "")
    if len(extras) > MAX_NAME_EXTRAS:
        extras = "o" + hashlib.blake2b(extras.encode(), digest_size=5).hexdigest()
    return f"{label}{'-' + extras if extras else ''}-s{seed}"


def register_resolvers() -> None:
    if not OmegaConf.has_resolver("run_name"):
        OmegaConf.register_new_resolver("run_name", run_name)
    if not OmegaConf.has_resolver("name_exclude_keys"):
        OmegaConf.register_new_resolver("name_exclude_keys", lambda: list(NAME_EXCLUDE_KEYS))


register_resolvers()


def compose(overrides: Sequence[str] = (), config_name: str = "train", return_hydra_config: bool = False) -> DictConfig:
    """The config `python -m ffnbench.train <overrides>` would run with (with `return_hydra_config`, also its
    `hydra` node: run and sweep directories, launcher, sweeper)."""
    return compose_many([overrides], config_name, return_hydra_config)[0]


def compose_many(override_lists: Iterable[Sequence[str]], config_name: str = "train",
                 return_hydra_config: bool = False) -> list[DictConfig]:
    """`compose` for many override lists (a sweep's jobs), with one Hydra initialisation for all of them."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
            return [hydra_compose(config_name=config_name, overrides=list(overrides),
                                  return_hydra_config=return_hydra_config) for overrides in override_lists]
    except (HydraException, OmegaConfBaseException) as e:
        # One line: Hydra's message spans several (the options of a group, the search path).
        raise ConfigError(" ".join(str(e).split("\nConfig search path")[0].split())) from None


def _get(node: Mapping | DictConfig, key: str, default: Any = None) -> Any:
    return node.get(key, default) if node is not None else default


def ffn_spec(node: Mapping | DictConfig) -> FFNSpec:
    """`cfg.ffn` → FFNSpec. With neither width nor budget, the FFN gets budget 4 (documented in train.yaml)."""
    width, budget = _get(node, "width"), _get(node, "budget")
    if width is None and budget is None:
        budget = DEFAULT_BUDGET
    act = _get(node, "act")
    if act is None or act == "???":
        raise ConfigError("ffn.act: no FFN variant chosen; pick one with ffn=<variant> (e.g. ffn=swiglu)")
    return FFNSpec(
        act=str(act),
        width=_number("ffn.width", width),
        budget=_number("ffn.budget", budget),
        bias=bool(_get(node, "bias", False)),
        multiple_of=_get(node, "multiple_of", 1),
        approximate=str(_get(node, "approximate", "none")),
    )


def _number(field: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:  # ffn.budget=8/3 on the command line arrives as a string
            num, _, den = value.partition("/")
            value = float(num) / float(den) if den else float(num)
        except ValueError:
            raise ConfigError(f"{field}: expected a number (e.g. 4 or 8/3), got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{field}: expected a number, got {value!r}")
    return float(value)


def model_config(cfg: DictConfig | Mapping, vocab_size: int) -> ModelConfig:
    """`cfg.model` + `cfg.ffn` → ModelConfig; solves d_model when model.non_embedding_params is set, and
    enforces ffn.max_mismatch for budget-matched FFNs."""
    spec = ffn_spec(cfg["ffn"])
    m = cfg["model"]
    d_model = m["d_model"]
    target = _get(m, "non_embedding_params")
    if target is not None:
        from ffnbench.accounting import solve_d_model

        d_model, _ = solve_d_model(float(target), m["n_layer"], m["n_head"], spec, bool(_get(m, "attn_bias", True)))
    mcfg = ModelConfig(
        vocab_size=vocab_size,
        seq_len=m["seq_len"],
        d_model=d_model,
        n_layer=m["n_layer"],
        n_head=m["n_head"],
        dropout=float(_get(m, "dropout", 0.0)),
        attn_bias=bool(_get(m, "attn_bias", True)),
        ffn=spec,
    )
    check_budget(spec, mcfg.d_model, float(_get(cfg["ffn"], "max_mismatch", math.inf)))
    return mcfg


def check_budget(spec: FFNSpec, d_model: int, max_mismatch: float) -> None:
    """A matched comparison is only as good as its match: fail loudly when rounding spoils it."""
    if spec.sizing != "budget":
        return
    size = size_ffn(spec, d_model)
    if abs(size.mismatch) > max_mismatch:
        raise ConfigError(
            f"ffn.budget: {spec.act} at budget {spec.ratio:g} on d_model={d_model} gets d_ff={size.d_ff} "
            f"(nominal {size.nominal_d_ff:.2f}, multiple_of={spec.multiple_of}), {size.params:,} params: "
            f"{size.mismatch:+.2%} off the budget of {size.target_params:,.0f}, beyond ffn.max_mismatch="
            f"{max_mismatch:g}. Use a smaller ffn.multiple_of or raise ffn.max_mismatch."
        )


def to_container(cfg: DictConfig | Mapping) -> dict:
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)  # type: ignore[return-value]
    return dict(cfg)


def flatten(node: Mapping, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def identity_diff(a: Mapping, b: Mapping, ignore: Iterable[str] = NON_IDENTITY_KEYS) -> dict[str, tuple]:
    """Keys whose values differ between two resolved configs, ignoring the keys that don't change what a
    run computes. {key: (a_value, b_value)}."""
    ignore = tuple(ignore)

    def keep(key: str) -> bool:
        return not any(key == k or key.startswith(k + ".") for k in ignore)

    fa, fb = flatten(a), flatten(b)
    return {k: (fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if keep(k) and fa.get(k) != fb.get(k)}
