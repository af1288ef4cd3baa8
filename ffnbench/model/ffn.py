"""The feed-forward networks under test: one registry, the pure functions that size them, and the modules.

Ungated FFN:  y = act(x·W_up + b_up)·W_down + b_down                      (2 matrices)
Gated FFN:    y = (act(x·W_gate + b_gate) ⊙ (x·W_up + b_up))·W_down + b_down  (3 matrices)

Everything that knows how a variant is sized or how many parameters it has lives here, so the model, the
accounting module, the report and the tests all ask the same functions.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ffnbench.errors import ConfigError


def _relu2(x: torch.Tensor) -> torch.Tensor:
    return torch.square(F.relu(x))


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


@dataclass(frozen=True)
class Variant:
    """One FFN variant: its nonlinearity, whether it is gated, and what it is called in the literature."""

    name: str
    act: Callable[[torch.Tensor], torch.Tensor]
    gated: bool
    description: str
    uses_gelu: bool = False  # the only ones for which `approximate="tanh"` means anything


# The registry. Names are what configs and the report use; `swish` and `silu` are the same function.
VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in [
        Variant("relu", F.relu, False, "max(0, x) — the original Transformer"),
        Variant("gelu", F.gelu, False, "x·Φ(x) — BERT, GPT-2", uses_gelu=True),
        Variant("swish", F.silu, False, "x·σ(x) (SiLU)"),
        Variant("relu2", _relu2, False, "max(0, x)² — Primer"),
        Variant("linear", _identity, False, "no nonlinearity: the control (collapses to one linear map)"),
        Variant("glu", torch.sigmoid, True, "σ(xW)⊙(xV) — Dauphin et al."),
        Variant("bilinear", _identity, True, "(xW)⊙(xV) — gated, no nonlinearity"),
        Variant("reglu", F.relu, True, "relu(xW)⊙(xV)"),
        Variant("geglu", F.gelu, True, "gelu(xW)⊙(xV) — T5 v1.1", uses_gelu=True),
        Variant("swiglu", F.silu, True, "silu(xW)⊙(xV) — PaLM, LLaMA"),
    ]
}
ALIASES = {"silu": "swish"}


def get_variant(name: str) -> Variant:
    """Look a variant up by name; an unknown name gets the list of known ones."""
    key = ALIASES.get(name, name)
    if key not in VARIANTS:
        known = ", ".join(list(VARIANTS) + [f"{a} (= {t})" for a, t in ALIASES.items()])
        raise ConfigError(f"ffn.act: unknown FFN variant {name!r}; known variants: {known}")
    return VARIANTS[key]


# ----------------------------------------------------------------------------------------------------------
# Sizing: pure functions of (d_model, spec). No module is built to answer these.
# ----------------------------------------------------------------------------------------------------------


def ffn_param_count(d_model: int, d_ff: int | float, gated: bool, bias: bool) -> int | float:
    """Exact parameters of one FFN: 2 (ungated) or 3 (gated) d_model×d_ff matrices, plus a bias on every
    linear when `bias` (d_ff per input projection, d_model for the output projection). A fractional d_ff
    gives the (fractional) count of an unrounded size: the budget a spec is measured against."""
    n_in = 2 if gated else 1
    weights = (n_in + 1) * d_model * d_ff
    biases = (n_in * d_ff + d_model) if bias else 0
    return weights + biases


def ffn_matmul_params(d_model: int, d_ff: int, gated: bool) -> int:
    """The weights that take part in matrix multiplies (the FLOP-bearing part of the FFN)."""
    return ffn_param_count(d_model, d_ff, gated, bias=False)


ROUNDINGS = ("nearest", "up")
_FLOAT_SLACK = 1e-6  # absorbs float error: 8/3·768 = 2047.9999999999998 counts as 2048


def round_to_multiple(x: float, multiple_of: int, rounding: str = "nearest") -> int:
    """A hidden size that is a multiple of `multiple_of` (at least one multiple): the nearest one, ties going up
    (ffnbench's rule: the budget is missed by at most half a step, either way), or the smallest one ≥ x (`up`:
    LLaMA's rule, 2/3·4·4096 = 10922.67 → 11008 at 256)."""
    if rounding not in ROUNDINGS:
        raise ConfigError(f"rounding: expected one of {', '.join(ROUNDINGS)}, got {rounding!r}")
    steps = math.ceil((x - _FLOAT_SLACK) / multiple_of) if rounding == "up" else \
        math.floor(x / multiple_of + 0.5 + _FLOAT_SLACK)
    return multiple_of * max(1, steps)


def round_up(x: float, multiple_of: int) -> int:
    """Smallest multiple of `multiple_of` that is ≥ x (round_to_multiple's `up` rule)."""
    return round_to_multiple(x, multiple_of, "up")


def budget_nominal_hidden_size(d_model: int, ratio: float, gated: bool, bias: bool) -> float:
    """`budget` sizing before rounding: the d_ff at which this FFN has the parameters of an *ungated* FFN
    at d_ff = ratio·d_model with the same bias setting.

    Ungated: d_ff = r·d.  Gated: 3·d·h + bias·(2h + d) = 2·d·(r·d) + bias·(r·d + d), so
    h = r·d·(2d + bias) / (3d + 2·bias) — without biases h = 2/3·r·d, which is why budget 4 gives
    SwiGLU its 8/3·d (341.33 → 341 at d = 128) and LLaMA-7B's 2/3·4·4096 = 10922.67 (rounded up to 256: 11008)."""
    if not gated:
        return ratio * d_model
    b = 1 if bias else 0
    return ratio * d_model * (2 * d_model + b) / (3 * d_model + 2 * b)


@dataclass(frozen=True)
class FFNSpec:
    """What varies between models: the variant, its bias, and how its hidden size is chosen.

    Exactly one of `width` (d_ff = width·d_model) and `budget` (match the params of an ungated FFN at
    that ratio) must be given. Both are rounded to the nearest multiple of `multiple_of` (ties up), or up
    with `rounding="up"` (the rule some published models use: reference.py's LLaMA-7B)."""

    act: str = "gelu"
    width: float | None = None
    budget: float | None = None
    bias: bool = False
    multiple_of: int = 1
    approximate: str = "none"  # GELU only: "none" (exact erf) or "tanh"
    rounding: str = "nearest"  # "nearest" multiple of multiple_of (ties up) or "up"

    def __post_init__(self) -> None:
        variant = get_variant(self.act)
        object.__setattr__(self, "act", variant.name)  # canonical name: silu -> swish
        if (self.width is None) == (self.budget is None):
            given = "both" if self.width is not None else "neither"
            raise ConfigError(
                f"ffn.width / ffn.budget: give exactly one way to size the FFN ({given} given): "
                "ffn.width=R for d_ff = R·d_model, or ffn.budget=R to match an ungated FFN at ratio R"
            )
        for field in ("width", "budget"):
            value = getattr(self, field)
            if value is not None and not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ConfigError(f"ffn.{field}: the ratio must be a positive number, got {value!r}")
        if not isinstance(self.multiple_of, int) or isinstance(self.multiple_of, bool) or self.multiple_of <= 0:
            raise ConfigError(f"ffn.multiple_of: must be a positive integer, got {self.multiple_of!r}")
        if self.approximate not in ("none", "tanh"):
            raise ConfigError(f"ffn.approximate: must be 'none' or 'tanh', got {self.approximate!r}")
        if self.approximate == "tanh" and not variant.uses_gelu:
            raise ConfigError(f"ffn.approximate='tanh' applies to gelu/geglu only, not {self.act!r}")
        if self.rounding not in ROUNDINGS:
            raise ConfigError(f"ffn.rounding: expected one of {', '.join(ROUNDINGS)}, got {self.rounding!r}")

    @property
    def variant(self) -> Variant:
        return VARIANTS[self.act]

    @property
    def gated(self) -> bool:
        return self.variant.gated

    @property
    def sizing(self) -> str:
        return "width" if self.width is not None else "budget"

    @property
    def ratio(self) -> float:
        return self.width if self.width is not None else self.budget  # type: ignore[return-value]

    @property
    def label(self) -> str:
        """Short, unique, human-readable: 'swiglu-b4-nobias'."""
        ratio = f"{self.ratio:g}" if float(self.ratio).is_integer() else f"{self.ratio:.4g}"
        tag = ("w" if self.sizing == "width" else "b") + ratio
        extra = f"-m{self.multiple_of}" if self.multiple_of != 1 else ""
        extra += "-tanh" if self.approximate == "tanh" else ""
        extra += "-up" if self.rounding == "up" else ""
        return f"{self.act}-{tag}-{'bias' if self.bias else 'nobias'}{extra}"


@dataclass(frozen=True)
class FFNSize:
    """The sizes a run records: nominal (before rounding) and actual d_ff, params, and the budget match."""

    d_model: int
    nominal_d_ff: float
    d_ff: int
    params: int
    target_params: float  # what the spec asked for: an ungated FFN at d_ff = ratio·d_model (unrounded)
    mismatch: float  # (params - target) / target: 0 for an exact match, negative when rounding fell short

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def size_ffn(spec: FFNSpec, d_model: int) -> FFNSize:
    """Hidden size and exact parameter count of `spec` at `d_model`, without building anything."""
    if not isinstance(d_model, int) or d_model <= 0:
        raise ConfigError(f"model.d_model: must be a positive integer, got {d_model!r}")
    if spec.sizing == "width":
        nominal = spec.ratio * d_model
    else:
        nominal = budget_nominal_hidden_size(d_model, spec.ratio, spec.gated, spec.bias)
    d_ff = round_to_multiple(nominal, spec.multiple_of, spec.rounding)
    params = ffn_param_count(d_model, d_ff, spec.gated, spec.bias)
    # The target is the ungated FFN at ratio·d_model that both sizings are measured against.
    target = ffn_param_count(d_model, spec.ratio * d_model, gated=False, bias=spec.bias)
    return FFNSize(d_model, nominal, d_ff, params, target, (params - target) / target)


# ----------------------------------------------------------------------------------------------------------
# Initialisation scale: what `model.ffn_init=matched` matches
# ----------------------------------------------------------------------------------------------------------

# The FFN whose output scale at init `matched` gives every variant: GPT-2's, an ungated GELU at 4·d_model.
MATCHED_REFERENCE = FFNSpec("gelu", width=4)
_QUADRATURE_POINTS = 101  # Gauss–Hermite nodes: exact for the polynomial variants, ~1e-12 for the smooth ones


def hidden_activation(spec: FFNSpec) -> Callable[[torch.Tensor], torch.Tensor]:
    """The function between the input projection(s) and the output projection of `spec` (tanh GELU included)."""
    if spec.approximate == "tanh":
        return functools.partial(F.gelu, approximate="tanh")  # a partial, not a lambda: the module pickles
    return spec.variant.act


def hidden_second_moment(spec: FFNSpec, pre_std: float) -> float:
    """E[h²] of one hidden unit at init, when every pre-activation is N(0, pre_std²) and biases are 0:
    E[act(z)²] (ungated), times E[u²] = pre_std² for the independent up projection u (gated). Gauss–Hermite
    quadrature in float64 through the variant's own activation: deterministic, and it draws no random numbers."""
    nodes, weights = np.polynomial.hermite.hermgauss(_QUADRATURE_POINTS)
    z = torch.from_numpy(math.sqrt(2.0) * pre_std * nodes)
    moment = float((torch.from_numpy(weights) * hidden_activation(spec)(z).square()).sum()) / math.sqrt(math.pi)
    return moment * pre_std**2 if spec.gated else moment


def matched_output_gain(spec: FFNSpec, d_model: int, init_std: float) -> float:
    """The factor on the output projection's init that gives `spec` the expected output variance at init of
    MATCHED_REFERENCE (the GPT-2 FFN) at the same d_model. The FFN's input is a LayerNorm output (unit RMS per
    token, gain 1, bias 0 at init), so with N(0, init_std²) input weights each pre-activation is N(0, s²),
    s = init_std·√d_model, and the output variance is d_ff · E[h²] · std(w_down)²; std(w_down) is common to both
    and cancels. 1.0 for the reference itself."""
    s = init_std * math.sqrt(d_model)
    ref = size_ffn(MATCHED_REFERENCE, d_model).d_ff * hidden_second_moment(MATCHED_REFERENCE, s)
    ours = size_ffn(spec, d_model).d_ff * hidden_second_moment(spec, s)
    return math.sqrt(ref / ours)


# ----------------------------------------------------------------------------------------------------------
# The module
# ----------------------------------------------------------------------------------------------------------


class ActivationStats:
    """Accumulates, on the device and without host syncs, what the hidden activation of one FFN did:
    exact zeros, and per unit whether it was ever non-zero and whether its pre-activation was ever > 0."""

    def __init__(self, d_ff: int, device: torch.device):
        self.zeros = torch.zeros((), dtype=torch.float64, device=device)
        self.count = torch.zeros((), dtype=torch.float64, device=device)
        self.ever_nonzero = torch.zeros(d_ff, dtype=torch.bool, device=device)
        self.ever_positive = torch.zeros(d_ff, dtype=torch.bool, device=device)

    @torch.no_grad()
    def update(self, pre: torch.Tensor, hidden: torch.Tensor) -> None:
        hidden = hidden.reshape(-1, hidden.shape[-1])
        pre = pre.reshape(-1, pre.shape[-1])
        self.zeros += (hidden == 0).sum()
        self.count += hidden.numel()
        self.ever_nonzero |= (hidden != 0).any(dim=0)
        self.ever_positive |= (pre > 0).any(dim=0)

    def all_reduce(self) -> None:
        """Combine the ranks' statistics (each saw its own shard): counts add up, per-unit flags are OR-ed."""
        import torch.distributed as dist

        dist.all_reduce(self.zeros)
        dist.all_reduce(self.count)
        for flags in (self.ever_nonzero, self.ever_positive):
            as_int = flags.int()  # no OR for bool tensors in every backend: MAX of 0/1
            dist.all_reduce(as_int, op=dist.ReduceOp.MAX)
            flags.copy_(as_int.bool())

    def summary(self) -> dict[str, float]:
        return {
            "zero_frac": float(self.zeros / self.count.clamp(min=1)),
            "dead_frac": float((~self.ever_nonzero).float().mean()),  # exactly 0 on every token
            "never_positive_frac": float((~self.ever_positive).float().mean()),  # pre-activation ≤ 0 always
        }


class FeedForward(nn.Module):
    """One FFN of the registry. Parameter names: w_up, w_down (+ w_gate when gated)."""

    def __init__(self, d_model: int, spec: FFNSpec):
        super().__init__()
        self.spec = spec
        self.size = size_ffn(spec, d_model)
        d_ff = self.size.d_ff
        if spec.gated:
            self.w_gate = nn.Linear(d_model, d_ff, bias=spec.bias)
        self.w_up = nn.Linear(d_model, d_ff, bias=spec.bias)
        self.w_down = nn.Linear(d_ff, d_model, bias=spec.bias)
        self.activation = hidden_activation(spec)
        self.stats: ActivationStats | None = None  # set by the training module during validation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.spec.gated:
            pre = self.w_gate(x)
            hidden = self.activation(pre) * self.w_up(x)
        else:
            pre = self.w_up(x)
            hidden = self.activation(pre)
        if self.stats is not None:
            self.stats.update(pre, hidden)
        return self.w_down(hidden)
