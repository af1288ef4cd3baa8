"""The typed specs a run is built from, read from its Hydra config: `cfg.ffn` → FFNSpec, `cfg.model` (+ `cfg.ffn`)
→ ModelConfig with the fixed-budget arm's d_model solved, `cfg.optim` → OptimConfig, `cfg.trainer` →
TrainerConfig, `cfg.seed`. The trainer, the `params` command and the sweep dry-run all read a config through
these, so they agree on what it means, and a bad value is one ConfigError naming the field, before any work."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ffnbench.config.validate import check_known_keys, count, flag, number, real
from ffnbench.errors import ConfigError
from ffnbench.model.accounting import count_params, solve_d_model
from ffnbench.model.ffn import FFNSpec, size_ffn
from ffnbench.model.model import COMPILE_MODES, ModelConfig
from ffnbench.placement import PRECISIONS, check_accelerator

DEFAULT_BUDGET = 4.0  # the sizing a variant gets when neither ffn.width nor ffn.budget is given


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
        width=number("ffn.width", width),
        budget=number("ffn.budget", budget),
        bias=bool(_get(node, "bias", False)),
        multiple_of=_get(node, "multiple_of", 1),
        approximate=str(_get(node, "approximate", "none")),
    )


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
        init_gain=_get(m, "init_gain", 1.0),  # as given: ModelConfig refuses what is not a positive number
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
    return number("model.non_embedding_params", target)


def _textbook_non_embedding(m: Mapping | DictConfig) -> int:
    """Non-embedding parameters of the model group (its own d_model) with an ungated 4·d FFN without bias."""
    ref = ModelConfig(vocab_size=1, seq_len=m["seq_len"], d_model=m["d_model"], n_layer=m["n_layer"],
                      n_head=m["n_head"], attn_bias=bool(_get(m, "attn_bias", True)), ffn=FFNSpec("gelu", width=4))
    return count_params(ref).non_embedding


DEFAULT_MAX_BUDGET_MISMATCH = 0.02  # conf/model/*.yaml: max_budget_mismatch, for configs that lack it


def solve_fixed_budget(target: float, m: Mapping | DictConfig, spec: FFNSpec) -> int:
    """The d_model of the Kaplan-style fixed-budget arm (`model.non_embedding_params`); a ConfigError when no
    multiple of n_head comes within `model.max_budget_mismatch` of the budget (the comparison would not be
    at a fixed budget)."""
    bound = real("model.max_budget_mismatch", _get(m, "max_budget_mismatch", DEFAULT_MAX_BUDGET_MISMATCH), 0)
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

        put("lr", real("optim.lr", self.lr, 0, low_open=True, fix=" (a learning rate is a positive number)"))
        put("min_lr_ratio", real("optim.min_lr_ratio", self.min_lr_ratio, 0, 1,
                                  fix=" (the cosine ends at lr·min_lr_ratio)"))
        count("optim.warmup_steps", self.warmup_steps, low=0)
        put("weight_decay", real("optim.weight_decay", self.weight_decay, 0))
        betas = self.betas
        if not isinstance(betas, Sequence) or isinstance(betas, str) or len(betas) != 2:
            raise ConfigError(f"optim.betas: expected two numbers [beta1, beta2], got {betas!r}")
        put("betas", tuple(real(f"optim.betas[{i}]", b, 0, 1, high_open=True,
                                 fix=" (Adam's betas are in [0, 1), e.g. [0.9, 0.95])") for i, b in enumerate(betas)))
        put("eps", real("optim.eps", self.eps, 0, low_open=True))
        if self.grad_clip is not None:
            put("grad_clip", real("optim.grad_clip", self.grad_clip, 0, low_open=True,
                                   fix=" (null turns clipping off)"))
        put("z_loss", real("optim.z_loss", self.z_loss, 0, fix=" (PaLM used 1e-4; 0 turns it off)"))


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
    loss_chunk: int | None = None  # tokens per chunk of the loss; None = model.LossHead's choice


    def __post_init__(self) -> None:
        check_accelerator(self.accelerator)
        count("trainer.devices", self.devices)
        count("trainer.num_nodes", self.num_nodes)
        if not isinstance(self.strategy, str) or not self.strategy:
            raise ConfigError(f"trainer.strategy: expected a Lightning strategy (auto, ddp), got {self.strategy!r}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"trainer.precision: unknown precision {self.precision!r}; known: "
                              f"{', '.join(PRECISIONS[:7])}")
        flag("trainer.compile", self.compile)
        flag("trainer.deterministic", self.deterministic)
        if self.compile_mode not in COMPILE_MODES:
            raise ConfigError(f"trainer.compile_mode: expected one of {', '.join(COMPILE_MODES)}, got "
                              f"{self.compile_mode!r}")
        if self.compile_mode != "default" and not self.compile:
            raise ConfigError(f"trainer.compile_mode={self.compile_mode}: it says how trainer.compile compiles, "
                              "and trainer.compile is false; add trainer.compile=true (trainer=gpu has it)")
        flag("trainer.progress_bar", self.progress_bar)
        if self.max_steps is not None:
            count("trainer.max_steps", self.max_steps)
        elif self.tokens_per_param is not None:
            real("trainer.tokens_per_param", self.tokens_per_param, 0, low_open=True)
        elif self.max_tokens is None:
            raise ConfigError("trainer.max_tokens: no training budget; set trainer.max_tokens or trainer.max_steps")
        else:
            real("trainer.max_tokens", self.max_tokens, 0, low_open=True)
        for name in ("val_every", "ckpt_every", "log_every"):
            count(f"trainer.{name}", getattr(self, name))
        if self.inner_steps is not None:
            count("trainer.inner_steps", self.inner_steps)
            every = self._every()
            if every % self.inner_steps:
                raise ConfigError(f"trainer.inner_steps={self.inner_steps}: it must divide trainer.log_every, "
                                  f"val_every and ckpt_every (their greatest common divisor is {every}); use "
                                  f"trainer.inner_steps=null (automatic) or a divisor of {every}")
        count("trainer.loss_chunk", self.loss_chunk, optional=True)
        if self.peak_flops is not None:
            real("trainer.peak_flops", self.peak_flops, 0, low_open=True,
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
        `reference_params`, see reference_params, else max_tokens) in steps of `tokens_per_step`, rounded up."""
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
    return count("seed", _get(cfg, "seed"), low=0)


@dataclass(frozen=True)
class RunSpec:
    """What a run's config says it computes, read and checked once (run_spec) and handed to whatever builds or
    plans the run, so none of it reads the raw config again."""

    model: ModelConfig
    optim: OptimConfig
    trainer: TrainerConfig
    seed: int
    reference_params: int  # what a budget in tokens per parameter counts (reference_params)

    def total_steps(self, tokens_per_step: int) -> int:
        """The run's length in optimizer steps at `tokens_per_step` (TrainerConfig.total_steps)."""
        return self.trainer.total_steps(tokens_per_step, self.reference_params)


def run_spec(cfg: DictConfig | Mapping, vocab_size: int) -> RunSpec:
    """`cfg` (a whole run config) → its RunSpec; the first bad setting is a ConfigError naming it.

    Args:
        cfg: the composed config (a DictConfig, or its container: a record's or a planned job's config).
        vocab_size: the tokenizer's vocabulary (tokenizer.vocab_size_for(cfg.data)).
    """
    return RunSpec(model=model_config(cfg, vocab_size), optim=optim_config(cfg["optim"]),
                   trainer=trainer_config(cfg["trainer"]), seed=run_seed(cfg), reference_params=reference_params(cfg))


def to_container(cfg: DictConfig | Mapping) -> dict:
    """A config node as a plain dict, interpolations resolved (a missing value `???` stays as it is)."""
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False)  # type: ignore[return-value]
    return dict(cfg)

