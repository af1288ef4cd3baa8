"""From Hydra configs (conf/) to the objects that are built from them, and the run-name resolver.

The one place that reads `cfg.ffn` / `cfg.model` / `cfg.optim` / `cfg.trainer` into an `FFNSpec` /
`ModelConfig` / `OptimConfig` / `TrainerConfig`, so the trainer, the `params` command and the sweep dry-run
all agree on what a config means, and a bad value is one ConfigError naming the field, before any work."""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ffnbench.errors import ConfigError, check_known_keys
from ffnbench.ffn import FFNSpec, size_ffn
from ffnbench.model import COMPILE_MODES, ModelConfig
from ffnbench.placement import ACCELERATORS, PRECISION_ALIASES

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
    "data.loader",  # follows from data.source (conf/data/<source>.yaml); records from before it existed lack it
    "data.num_proc",
    "trainer.progress_bar",
    "trainer.log_every",
    "trainer.compile",
    "trainer.compile_mode",
    "trainer.devices",
    "trainer.num_nodes",
    "trainer.strategy",
    "trainer.peak_flops",
    "trainer.ckpt_every",
    "trainer.inner_steps",  # how many optimizer steps one Lightning batch holds: the same steps, in the same order
    "model.max_budget_mismatch",  # a bound that refuses a config; it changes nothing a run computes
    "lr_protocol",  # which runs a sweep makes to choose an lr (ffnbench.lr_protocol), not what one computes
    "instability",  # the thresholds that name a run's instabilities when it is recorded (ffnbench.instability)
    "hydra",
)

# Keys added after records were written, and the value a record without one had (a run before lr tuning existed
# was not a tuning run; one before trainer.deterministic existed was not deterministic; one before model.init,
# model.qk_norm and optim.z_loss existed had GPT-2's init, no QK-norm and no z-loss).
IDENTITY_DEFAULTS = {"tuning": False, "trainer.deterministic": False, "model.init": "gpt2", "model.qk_norm": False,
                     "optim.z_loss": 0.0}


# The overrides a run's directory name leaves out: the FFN and the seed (the name's label says them) and
# whatever does not change what a run computes (NON_IDENTITY_KEYS). Hydra reads this list through the
# `name_exclude_keys` resolver (conf/train.yaml: hydra.job.config.override_dirname.exclude_keys).
# trainer.compile (and its mode) stay in the name: it may resume an eager run, but asked for by name it is a run
# of its own. trainer.accelerator is part of a run's identity (as resolved: HARDWARE_KEYS) but not of its name:
# `auto` and what it resolves to name the same run, and a run of another device meets the directory and is
# refused there.
NAME_EXCLUDE_KEYS = ("seed", "experiment", "ffn", "ffn.act", "ffn.width", "ffn.budget", "ffn.bias",
                     "ffn.multiple_of", "ffn.approximate", "trainer", "trainer.accelerator",
                     *(k for k in NON_IDENTITY_KEYS if k not in ("trainer.compile", "trainer.compile_mode")),
                     # Hydra excludes exact keys: the blocks above by their settings, which a preset's grid may set
                     "lr_protocol.robust", "lr_protocol.min_lrs", "lr_protocol.min_seeds", "lr_protocol.bracket_cap",
                     "instability.plateau_margin", "instability.plateau_after", "instability.spike_margin")
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
    if not OmegaConf.has_resolver("visible_gpus"):  # conf/hydra/launcher/local.yaml: the GPUs of this machine
        from ffnbench.placement import visible_gpu_count

        OmegaConf.register_new_resolver("visible_gpus", visible_gpu_count)
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
                 return_hydra_config: bool = False, cache: dict | None = None) -> list[DictConfig]:
    """`compose` for many override lists (a sweep's jobs), with one Hydra initialisation for all of them.

    `cache`: a dict the caller keeps, to compose an override list it has composed before only once (a sweep plans
    its jobs again after the lr-tuning stage; a composition takes a Hydra second or so). Each call gets a copy."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    cache = {} if cache is None else cache
    lists = [tuple(overrides) for overrides in override_lists]
    try:
        todo = [o for o in dict.fromkeys(lists) if (config_name, return_hydra_config, o) not in cache]
        if todo:
            with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
                for overrides in todo:
                    cache[config_name, return_hydra_config, overrides] = hydra_compose(
                        config_name=config_name, overrides=list(overrides), return_hydra_config=return_hydra_config)
        return [copy.deepcopy(cache[config_name, return_hydra_config, o]) for o in lists]
    except (HydraException, OmegaConfBaseException) as e:
        # One line: Hydra's message spans several (the options of a group, the search path).
        raise ConfigError(" ".join(str(e).split("\nConfig search path")[0].split())) from None


MULTIRUN_FLAGS = ("-m", "--multirun")


def check_overrides(args: Sequence[str]) -> None:
    """Compose the command line of `python -m ffnbench.train [-m] <overrides>` as Hydra will, so that an override
    Hydra cannot apply (an unknown option of a config group, a key that does not exist, a typo in the syntax)
    is a one-line ConfigError before Hydra prints its own multi-line one. With -m, each value of a sweep override
    is composed with the other (fixed) overrides. A command line with Hydra's other flags (--help, --cfg, -cn,
    ...) is left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    if any(a.startswith("-") and a not in MULTIRUN_FLAGS for a in args):
        return
    overrides = [a for a in args if a not in MULTIRUN_FLAGS]
    if not any(a in MULTIRUN_FLAGS for a in args):
        compose(overrides, return_hydra_config=True)
        return
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as e:
        raise ConfigError(" ".join(str(e).split())) from None
    fixed = [o.input_line for o in parsed if not o.is_sweep_override()]
    jobs = [fixed]
    for o in parsed:
        if o.is_choice_sweep() or o.is_range_sweep():  # a glob's options are known to Hydra's loader only
            jobs += [[*fixed, f"{o.get_key_element()}={v}"] for v in o.sweep_string_iterator()]
    compose_many(jobs, return_hydra_config=True)


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
    """`cfg.model` + `cfg.ffn` → ModelConfig; solves d_model when model.non_embedding_params is set (enforcing
    model.max_budget_mismatch), and enforces ffn.max_mismatch for budget-matched FFNs."""
    spec = ffn_spec(cfg["ffn"])
    m = cfg["model"]
    d_model = m["d_model"]
    target = fixed_budget(m)
    if target is not None:
        d_model = solve_fixed_budget(target, m, spec)
    mcfg = ModelConfig(
        vocab_size=vocab_size,
        seq_len=m["seq_len"],
        d_model=d_model,
        n_layer=m["n_layer"],
        n_head=m["n_head"],
        dropout=float(_get(m, "dropout", 0.0)),
        attn_bias=bool(_get(m, "attn_bias", True)),
        ffn=spec,
        ffn_init=str(_get(m, "ffn_init", "gpt2")),
        init=str(_get(m, "init", "gpt2")),
        qk_norm=_get(m, "qk_norm", False),  # as given: ModelConfig refuses what is not true or false
    )
    check_budget(spec, mcfg.d_model, float(_get(cfg["ffn"], "max_mismatch", math.inf)))
    return mcfg


def reference_params(cfg: DictConfig | Mapping) -> int:
    """The parameters a training budget in tokens per parameter (trainer.tokens_per_param) counts: the
    non-embedding parameters of the model group with the textbook FFN (ungated, d_ff = 4·d_model, no bias),
    or its fixed non-embedding budget (model.non_embedding_params). One count per model, not per variant, so
    every FFN variant and width of a model trains the same tokens; non-embedding (Kaplan et al. 2020), so the
    tokenizer's vocabulary does not change it. A GPU user who swaps the model group keeps the ratio."""
    m = cfg["model"]
    target = fixed_budget(m)
    return int(target) if target is not None else _textbook_non_embedding(m)


REFERENCE_BUDGET = "reference"  # model.non_embedding_params: the model group's own count with a 4·d GELU FFN


def fixed_budget(m: Mapping | DictConfig) -> float | None:
    """The fixed non-embedding budget of `cfg.model` (model.non_embedding_params): None (no fixed budget), a
    number, or `reference`: what the model group has with the textbook FFN — so a preset's fixed-budget arm
    scales with whatever model group it runs with."""
    target = _get(m, "non_embedding_params")
    if target is None:
        return None
    if target == REFERENCE_BUDGET:
        return float(_textbook_non_embedding(m))
    return _number("model.non_embedding_params", target)


def _textbook_non_embedding(m: Mapping | DictConfig) -> int:
    """Non-embedding parameters of the model group (its own d_model) with an ungated 4·d FFN without bias."""
    from ffnbench.accounting import count_params

    ref = ModelConfig(vocab_size=1, seq_len=m["seq_len"], d_model=m["d_model"], n_layer=m["n_layer"],
                      n_head=m["n_head"], attn_bias=bool(_get(m, "attn_bias", True)), ffn=FFNSpec("gelu", width=4))
    return count_params(ref).non_embedding


DEFAULT_MAX_BUDGET_MISMATCH = 0.02  # conf/model/*.yaml: max_budget_mismatch, for configs that lack it


def solve_fixed_budget(target: float, m: Mapping | DictConfig, spec: FFNSpec) -> int:
    """The d_model of the Kaplan-style fixed-budget arm (`model.non_embedding_params`); a ConfigError when no
    multiple of n_head comes within `model.max_budget_mismatch` of the budget (the comparison would not be
    at a fixed budget)."""
    from ffnbench.accounting import solve_d_model

    bound = _real("model.max_budget_mismatch", _get(m, "max_budget_mismatch", DEFAULT_MAX_BUDGET_MISMATCH), 0)
    d_model, mismatch = solve_d_model(target, m["n_layer"], m["n_head"], spec, bool(_get(m, "attn_bias", True)),
                                      qk_norm=_get(m, "qk_norm", False) is True)
    if abs(mismatch) > bound:
        raise ConfigError(
            f"model.max_budget_mismatch: {spec.label} with {m['n_layer']} layers of {m['n_head']} heads gets "
            f"d_model={d_model}, {mismatch:+.2%} off model.non_embedding_params={target:,.0f}, beyond "
            f"model.max_budget_mismatch={bound:g}; raise the budget or the bound, or use fewer heads")
    return d_model


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


# ---- optimizer and trainer settings -----------------------------------------------------------------------

PRECISIONS = ("auto", "64-true", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true",
              "64", "32", "16", "bf16", "transformer-engine", "transformer-engine-float16")  # Lightning's names


def _real(field: str, value: Any, low: float | None = None, high: float | None = None, *, low_open: bool = False,
          high_open: bool = False, fix: str = "") -> float:
    """`value` as a float within [low, high] (either end open or absent), or a ConfigError naming `field`."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{field}: expected a number, got {value!r}{fix}")
    below = low is not None and (value <= low if low_open else value < low)
    above = high is not None and (value >= high if high_open else value > high)
    if below or above:
        if high is None:
            bound = f"{'>' if low_open else '≥'} {low:g}"
        else:
            bound = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        raise ConfigError(f"{field}: must be {bound}, got {value!r}{fix}")
    return float(value)


def _count(field: str, value: Any, low: int = 1) -> int:
    """`value` as an int ≥ low, or a ConfigError naming `field`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        what = "a positive integer" if low == 1 else f"an integer ≥ {low}"
        raise ConfigError(f"{field}: must be {what}, got {value!r}")
    return value


def _flag(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{field}: expected true or false, got {value!r}")
    return value


@dataclass(frozen=True)
class OptimConfig:
    """`cfg.optim` (conf/optim/adamw.yaml): AdamW, linear warmup, cosine decay to lr·min_lr_ratio, clipping."""

    lr: float
    min_lr_ratio: float = 0.1
    warmup_steps: int = 0
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    grad_clip: float | None = None  # max global grad norm; None = no clipping
    z_loss: float = 0.0  # PaLM's z_loss·mean(logsumexp(logits)²), added to the training loss; 0 = none

    def __post_init__(self) -> None:  # validates, and stores numbers as floats (an lr of 1 is 1.0)
        def put(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        put("lr", _real("optim.lr", self.lr, 0, low_open=True, fix=" (a learning rate is a positive number)"))
        put("min_lr_ratio", _real("optim.min_lr_ratio", self.min_lr_ratio, 0, 1,
                                  fix=" (the cosine ends at lr·min_lr_ratio)"))
        _count("optim.warmup_steps", self.warmup_steps, low=0)
        put("weight_decay", _real("optim.weight_decay", self.weight_decay, 0))
        betas = self.betas
        if not isinstance(betas, Sequence) or isinstance(betas, str) or len(betas) != 2:
            raise ConfigError(f"optim.betas: expected two numbers [beta1, beta2], got {betas!r}")
        put("betas", tuple(_real(f"optim.betas[{i}]", b, 0, 1, high_open=True,
                                 fix=" (Adam's betas are in [0, 1), e.g. [0.9, 0.95])") for i, b in enumerate(betas)))
        put("eps", _real("optim.eps", self.eps, 0, low_open=True))
        if self.grad_clip is not None:
            put("grad_clip", _real("optim.grad_clip", self.grad_clip, 0, low_open=True,
                                   fix=" (null turns clipping off)"))
        put("z_loss", _real("optim.z_loss", self.z_loss, 0, fix=" (PaLM used 1e-4; 0 turns it off)"))


def optim_config(node: Mapping | DictConfig) -> OptimConfig:
    """`cfg.optim` → OptimConfig."""
    node = to_container(node)
    check_known_keys("optim", node, OptimConfig)
    return OptimConfig(**node)


MAX_INNER_STEPS = 16  # the most steps a Lightning batch holds by default: their batches sit on the device together


@dataclass(frozen=True)
class TrainerConfig:
    """`cfg.trainer` (conf/trainer/*.yaml): where a run trains, its budget and how often it validates, logs and
    checkpoints. placement.resolve_device_setup turns accelerator/devices/precision/strategy into what this machine
    can do; this class only judges what can be judged without looking at the machine."""

    accelerator: str = "auto"
    devices: int = 1
    num_nodes: int = 1
    strategy: str = "auto"
    precision: str = "auto"
    compile: bool = False
    deterministic: bool = False  # torch.use_deterministic_algorithms + CUBLAS_WORKSPACE_CONFIG (Lightning's)
    compile_mode: str = "default"  # how `compile` compiles: default | reduce-overhead (CUDA graphs; GPU only)
    max_tokens: float | None = None  # the budget in tokens ...
    tokens_per_param: float | None = None  # ... or in tokens per reference parameter (wins over max_tokens) ...
    max_steps: int | None = None  # ... or in optimizer steps (wins over both)
    val_every: int = 100
    ckpt_every: int = 100
    log_every: int = 10
    inner_steps: int | None = None  # optimizer steps per Lightning batch; None = self.steps_per_batch()'s choice
    peak_flops: float | None = None  # per-device peak FLOP/s for MFU; None = from the GPU table or measured
    progress_bar: bool = True

    def __post_init__(self) -> None:
        if self.accelerator not in ACCELERATORS:
            raise ConfigError(f"trainer.accelerator: expected auto, cpu or gpu, got {self.accelerator!r}")
        _count("trainer.devices", self.devices)
        _count("trainer.num_nodes", self.num_nodes)
        if not isinstance(self.strategy, str) or not self.strategy:
            raise ConfigError(f"trainer.strategy: expected a Lightning strategy (auto, ddp), got {self.strategy!r}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"trainer.precision: unknown precision {self.precision!r}; known: "
                              f"{', '.join(PRECISIONS[:7])}")
        _flag("trainer.compile", self.compile)
        _flag("trainer.deterministic", self.deterministic)
        if self.compile_mode not in COMPILE_MODES:
            raise ConfigError(f"trainer.compile_mode: expected one of {', '.join(COMPILE_MODES)}, got "
                              f"{self.compile_mode!r}")
        if self.compile_mode != "default" and not self.compile:
            raise ConfigError(f"trainer.compile_mode={self.compile_mode}: it says how trainer.compile compiles, "
                              "and trainer.compile is false; add trainer.compile=true (trainer=gpu has it)")
        _flag("trainer.progress_bar", self.progress_bar)
        if self.max_steps is not None:
            _count("trainer.max_steps", self.max_steps)
        elif self.tokens_per_param is not None:
            _real("trainer.tokens_per_param", self.tokens_per_param, 0, low_open=True)
        elif self.max_tokens is None:
            raise ConfigError("trainer.max_tokens: no training budget; set trainer.max_tokens or trainer.max_steps")
        else:
            _real("trainer.max_tokens", self.max_tokens, 0, low_open=True)
        for name in ("val_every", "ckpt_every", "log_every"):
            _count(f"trainer.{name}", getattr(self, name))
        if self.inner_steps is not None:
            _count("trainer.inner_steps", self.inner_steps)
            every = self._every()
            if every % self.inner_steps:
                raise ConfigError(f"trainer.inner_steps={self.inner_steps}: it must divide trainer.log_every, "
                                  f"val_every and ckpt_every (their greatest common divisor is {every}); use "
                                  f"trainer.inner_steps=null (automatic) or a divisor of {every}")
        if self.peak_flops is not None:
            _real("trainer.peak_flops", self.peak_flops, 0, low_open=True,
                  fix=" (null = from the GPU table or measured)")

    def _every(self) -> int:
        return math.gcd(self.log_every, self.val_every, self.ckpt_every)

    def steps_per_batch(self) -> int:
        """Optimizer steps per Lightning batch (module.LMModule.training_step takes them in a loop): inner_steps, or
        by default the largest divisor of gcd(log_every, val_every, ckpt_every) up to MAX_INNER_STEPS (10 at the
        defaults). Lightning's fixed cost per batch, about half a millisecond of hooks and loop bookkeeping, is then
        paid once per so many steps, which a step of a few milliseconds (a small model on a GPU) notices. A batch
        never spans a logging, validation or checkpoint step, so all three happen at a batch's end, as before."""
        if self.inner_steps is not None:
            return self.inner_steps
        every = self._every()
        return max(k for k in range(1, min(every, MAX_INNER_STEPS) + 1) if every % k == 0)

    def total_steps(self, tokens_per_step: int, reference_params: int | None = None) -> int:
        """The run's length in optimizer steps (≥ 1): max_steps, or the token budget (tokens_per_param ×
        `reference_params`, see config.reference_params, else max_tokens) in steps of `tokens_per_step`, rounded up."""
        if self.max_steps:
            return self.max_steps
        if self.tokens_per_param is not None:
            if not reference_params:
                raise ValueError("trainer.tokens_per_param needs the model's reference parameter count")
            return max(1, math.ceil(float(self.tokens_per_param) * reference_params / tokens_per_step))
        return math.ceil(float(self.max_tokens) / tokens_per_step)


def trainer_config(node: Mapping | DictConfig) -> TrainerConfig:
    """`cfg.trainer` → TrainerConfig (precision as text: `precision=32` on the command line arrives as an int)."""
    node = to_container(node)
    check_known_keys("trainer", node, TrainerConfig)
    if isinstance(node.get("precision"), int) and not isinstance(node.get("precision"), bool):
        node = {**node, "precision": str(node["precision"])}
    return TrainerConfig(**node)


def run_seed(cfg: Mapping | DictConfig) -> int:
    """`cfg.seed`: an integer ≥ 0 (Lightning would replace a negative one with a random seed)."""
    return _count("seed", _get(cfg, "seed"), low=0)


# ---- helpers ----------------------------------------------------------------------------------------------


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


# What a run resolves on the machine it starts on, stored resolved in its config (with_hardware): the device kind
# and the precision change what it computes, so they are part of its identity.
HARDWARE_KEYS = ("trainer.accelerator", "trainer.precision")


def with_hardware(config: dict, accelerator: str | None, precision: str | None) -> dict:
    """`config` with `trainer.accelerator` and `trainer.precision` as a run resolves them
    (placement.resolve_device_setup: cpu | gpu, and Lightning's full precision name) in place of what was asked
    (auto); None keeps what was asked (the sweep planner, for what only the node a run starts on can decide)."""
    trainer = dict(config.get("trainer") or {})
    if accelerator is not None:
        trainer["accelerator"] = accelerator
    if precision is not None:
        trainer["precision"] = precision
    return {**config, "trainer": trainer}


# A record written before a trainer key existed or was stored resolved holds what that key meant then: ffnbench
# ran only on CPUs until the device and precision were stored, so `auto` (or nothing) was cpu and 32-true.
LEGACY_TRAINER = {"trainer.accelerator": "cpu"}


def _as_resolved(flat: dict[str, Any]) -> dict[str, Any]:
    """A flattened record's trainer keys as a run of today stores them (LEGACY_TRAINER, Lightning's full
    precision names), so that an old record and a new one of the same run compare equal."""
    out = dict(flat)
    for key, then in LEGACY_TRAINER.items():
        if out.get(key) in (None, "auto"):
            out[key] = then
    if out["trainer.accelerator"] == "cuda":
        out["trainer.accelerator"] = "gpu"
    precision = out.get("trainer.precision")
    precision = PRECISION_ALIASES.get(str(precision), precision) if precision is not None else None
    if precision in (None, "auto") and out["trainer.accelerator"] == "cpu":
        precision = "32-true"
    out["trainer.precision"] = precision
    return out


def identity_diff(a: Mapping, b: Mapping, ignore: Iterable[str] = NON_IDENTITY_KEYS) -> dict[str, tuple]:
    """Keys whose values differ between two resolved configs, ignoring the keys that don't change what a
    run computes. {key: (a_value, b_value)}. A key missing from a record written before it existed counts as
    the value it implicitly had then (IDENTITY_DEFAULTS), and the trainer keys of a record written before they
    were stored resolved compare as what they meant (LEGACY_TRAINER)."""
    keep = _kept(ignore)
    fa, fb = (_as_resolved({**IDENTITY_DEFAULTS, **flatten(x)}) for x in (a, b))
    return {k: (fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if keep(k) and fa.get(k) != fb.get(k)}


def identity_key(config: Mapping, ignore: Iterable[str] = NON_IDENTITY_KEYS) -> frozenset:
    """A hashable form of what identity_diff compares: two configs have equal keys exactly when identity_diff finds
    no difference between them (missing keys are absent, not None; equal values compare equal, 1 and 1.0 too). For
    grouping many configs at once (a sweep's tuning runs) without comparing every pair."""
    keep = _kept(ignore)
    if isinstance(config, DictConfig):
        config = OmegaConf.to_container(config, resolve=True)
    flat = _as_resolved({**IDENTITY_DEFAULTS, **flatten(config)})
    return frozenset((k, _hashable(v)) for k, v in flat.items() if keep(k) and v is not None)


def _kept(ignore: Iterable[str]):
    ignore = tuple(ignore)
    return lambda key: not any(key == k or key.startswith(k + ".") for k in ignore)


def _hashable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return frozenset((k, _hashable(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, tuple):  # identity_diff tells a tuple from the list of the same items (records hold lists)
        return (tuple, *(_hashable(v) for v in value))
    return value
