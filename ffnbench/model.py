"""The decoder-only language model: a pre-norm GPT in which only the FFN varies.

    x = wte[idx] + wpe[pos]
    for each block:  x = x + Attn(LN(x));  x = x + FFN(LN(x))
    logits = LN(x) · wteᵀ                       (tied output head)

Attention is causal multi-head attention through `scaled_dot_product_attention` (flash / memory-efficient
kernels on GPU); with `qk_norm`, queries and keys are layer-normalised per head before it (q = LN(q), k = LN(k):
the attention logits stay bounded whatever the weights grow to, the small-scale stability fix of Dehghani et al.
2023 and Wortsman et al. 2023).

Initialisation (`init`), biases 0 and LayerNorm gains 1 in both:
- gpt2 (the default): GPT-2's, every weight N(0, 0.02²), the residual output projections (attn.proj, ffn.w_down)
  scaled by 1/√(2·n_layer).
- fan_in: width-aware, every Linear weight N(0, 1/fan_in) (fan_in = in_features: d_ff for ffn.w_down), the same
  1/√(2·n_layer) on the residual projections, and the embeddings wte and wpe N(0, 1/d_model), so the tied head's
  logits LN(x)·wteᵀ start at unit scale whatever the width.
Either way with one twist that makes comparisons fair: every parameter is drawn from its own generator seeded by
(seed, parameter name), so for the same seed every non-FFN parameter starts identical whatever FFN the
model holds, and the FFN of one variant does not shift the random stream of anything else.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ffnbench.errors import ConfigError
from ffnbench.ffn import MATCHED_REFERENCE, FeedForward, FFNSpec, matched_output_gain, size_ffn

INIT_STD = 0.02
FFN_INITS = ("gpt2", "matched")  # model.ffn_init
INITS = ("gpt2", "fan_in")  # model.init
MIN_QK_NORM_HEAD_DIM = 4  # a LayerNorm over 1 element is identically 0, over 2 it is ±1: no attention is left
RESIDUAL_PROJECTIONS = ("attn.proj.weight", "ffn.w_down.weight")  # write into the residual stream


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = 256
    seq_len: int = 128
    d_model: int = 128
    n_layer: int = 4
    n_head: int = 4
    dropout: float = 0.0
    attn_bias: bool = True  # attention and LayerNorm biases (GPT-2 style); FFN bias is part of the FFN spec
    ffn: FFNSpec = field(default_factory=lambda: FFNSpec(act="gelu", width=4))
    # gpt2: every FFN as GPT-2 initialises it, so output scales at init differ ~10× between variants;
    # matched: the output projection rescaled so every variant starts at the GPT-2 FFN's output variance.
    ffn_init: str = "gpt2"
    init: str = "gpt2"  # gpt2: N(0, 0.02) everywhere | fan_in: N(0, 1/fan_in) (the module docstring)
    qk_norm: bool = False  # a LayerNorm over each head's queries and keys before the attention

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len", "d_model", "n_layer", "n_head"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"model.{name}: must be a positive integer, got {value!r}")
        if self.d_model % self.n_head:
            raise ConfigError(
                f"model.n_head: d_model={self.d_model} is not divisible by n_head={self.n_head}; "
                "pick n_head among the divisors of d_model"
            )
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"model.dropout: must be in [0, 1), got {self.dropout!r}")
        if self.ffn_init not in FFN_INITS:
            raise ConfigError(f"model.ffn_init: expected {' or '.join(FFN_INITS)}, got {self.ffn_init!r}")
        if self.init not in INITS:
            raise ConfigError(f"model.init: expected {' or '.join(INITS)}, got {self.init!r}")
        if not isinstance(self.qk_norm, bool):
            raise ConfigError(f"model.qk_norm: expected true or false, got {self.qk_norm!r}")
        if self.qk_norm and self.head_dim < MIN_QK_NORM_HEAD_DIM:
            raise ConfigError(
                f"model.qk_norm: heads of d_model/n_head = {self.d_model}/{self.n_head} = {self.head_dim} dimensions "
                f"leave a per-head LayerNorm nothing to normalise (it needs ≥ {MIN_QK_NORM_HEAD_DIM}); use fewer "
                "heads or model.qk_norm=false")


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.dropout = cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.attn_bias)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.attn_bias)
        self.qk_norm = cfg.qk_norm
        if cfg.qk_norm:  # only then: a default model has exactly the parameters (and the ops) it had before
            self.q_norm = nn.LayerNorm(cfg.head_dim, bias=cfg.attn_bias)
            self.k_norm = nn.LayerNorm(cfg.head_dim, bias=cfg.attn_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_head, d // self.n_head).permute(2, 0, 3, 1, 4)
        if self.qk_norm:  # (b, n_head, t, head_dim): over each head's dimensions
            q, k = self.q_norm(q), self.k_norm(k)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_attn = nn.LayerNorm(cfg.d_model, bias=cfg.attn_bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_ffn = nn.LayerNorm(cfg.d_model, bias=cfg.attn_bias)
        self.ffn = FeedForward(cfg.d_model, cfg.ffn)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln_attn(x)))
        return x + self.drop(self.ffn(self.ln_ffn(x)))


class LossHead(nn.Module):
    """The final LayerNorm, the tied output head and the cross-entropy, as one parameterless module over the
    parameters it is handed (they stay GPT's own: names, init and checkpoint keys are unchanged). A module of its own
    so that `compile_blocks` compiles it with the blocks: compiled, the fp32 cast and the log-softmax fuse into the
    head's matmul output instead of materialising (tokens × vocab) fp32 logits — on `model=small` with an 8192-token
    BPE vocabulary the head is a large share of a GPU step. Eager, it computes exactly what LayerNorm, F.linear and
    F.cross_entropy computed inline."""

    def __init__(self, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, ln_weight: torch.Tensor, ln_bias: torch.Tensor | None, wte: torch.Tensor,
                targets: torch.Tensor) -> torch.Tensor:
        logits = F.linear(F.layer_norm(x, (x.size(-1),), ln_weight, ln_bias, self.eps), wte)
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, bias=cfg.attn_bias)
        self.loss_head = LossHead(self.ln_f.eps)  # no parameters of its own
        self.reset_parameters(seed)

    @property
    def ffns(self) -> list[FeedForward]:
        return [block.ffn for block in self.blocks]

    @torch.no_grad()
    def reset_parameters(self, seed: int) -> None:
        """GPT-2 (init=gpt2) or fan-in (init=fan_in) initialisation, each parameter from a generator seeded by
        (seed, its name). With ffn_init=matched the FFN output projections are then scaled by
        ffn.matched_output_gain (computed, not drawn: every other parameter, and the draws of the FFN's own, stay as
        they are)."""
        gain = None
        if self.cfg.ffn_init == "matched":
            gain = self._fan_in_matched_gain() if self.cfg.init == "fan_in" else \
                matched_output_gain(self.cfg.ffn, self.cfg.d_model, INIT_STD)
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                p.zero_()
            elif p.ndim == 1:  # LayerNorm gains
                p.fill_(1.0)
            else:
                gen = torch.Generator().manual_seed(param_seed(seed, name))
                p.copy_(torch.randn(p.shape, generator=gen) * self._init_std(name, p))
                if gain is not None and name.endswith("ffn.w_down.weight"):
                    p.mul_(gain)

    def _init_std(self, name: str, p: torch.Tensor) -> float:
        """The std a weight matrix is drawn with. gpt2: 0.02, the residual projections 0.02/√(2·n_layer). fan_in:
        1/√fan_in, with fan_in its input width (a Linear's in_features; for the embeddings d_model, the width of the
        vectors they hand on), the residual projections also times 1/√(2·n_layer)."""
        residual = name.endswith(RESIDUAL_PROJECTIONS)
        if self.cfg.init == "gpt2":
            return INIT_STD / math.sqrt(2 * self.cfg.n_layer) if residual else INIT_STD
        fan_in = self.cfg.d_model if name in ("wte.weight", "wpe.weight") else p.shape[1]
        return 1 / math.sqrt(fan_in) * (1 / math.sqrt(2 * self.cfg.n_layer) if residual else 1.0)

    def _fan_in_matched_gain(self) -> float:
        """ffn_init=matched under init=fan_in: the factor that gives this FFN the output variance at init of the GPT-2
        FFN (MATCHED_REFERENCE) initialised the same way. The pre-activations are N(0, 1) (a unit-RMS LayerNorm
        output times weights of variance 1/d_model): matched_output_gain's init_std·√d_model = 1. Its output
        variance d_ff·E[h²]·std(w_down)² assumes a std(w_down) common to both FFNs; here std(w_down)² ∝ 1/d_ff,
        so the ratio of the two d_ff it divides by comes back in: the gain is √(E_ref[h²] / E[h²])."""
        d, spec = self.cfg.d_model, self.cfg.ffn
        gain = matched_output_gain(spec, d, 1 / math.sqrt(d))
        return gain * math.sqrt(size_ffn(spec, d).d_ff / size_ffn(MATCHED_REFERENCE, d).d_ff)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, z_loss: float = 0.0) -> torch.Tensor:
        """Logits (B, T, V), or the mean next-token cross-entropy in nats when `targets` is given — plus, with
        `z_loss` > 0, PaLM's auxiliary z_loss·mean(logsumexp(logits)²) over the tokens, which keeps the softmax's
        normaliser near 1 (the training loss of optim.z_loss; validation asks for the cross-entropy alone)."""
        t = idx.shape[1]
        if t > self.cfg.seq_len:
            raise ConfigError(f"model.seq_len: got a sequence of {t} tokens, longer than seq_len={self.cfg.seq_len}")
        x = self.drop(self.wte(idx) + self.wpe.weight[:t])
        for block in self.blocks:
            x = block(x)
        if targets is not None and not z_loss:  # the plain cross-entropy, computed as it always was
            return self.loss_head(x, self.ln_f.weight, self.ln_f.bias, self.wte.weight, targets)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        if targets is None:
            return logits
        flat = logits.float().view(-1, logits.size(-1))
        lse = torch.logsumexp(flat, -1)
        return F.cross_entropy(flat, targets.reshape(-1)) + z_loss * lse.square().mean()


# How `trainer.compile` compiles each block (torch.compile's `mode`). reduce-overhead also records each block's
# forward and backward as CUDA graphs: one launch instead of dozens of kernel launches, which is most of a small
# model's step on a GPU. CUDA only (train.check_run refuses it elsewhere).
COMPILE_MODES = ("default", "reduce-overhead")


def compile_blocks(model: GPT, mode: str = "default") -> None:
    """torch.compile every block of `model` and its loss head in place, so parameter names (and checkpoint keys)
    stay as they are.
    The training module and the benchmark's reference loop both compile here, the same way (`mode` is checked
    with the rest of `cfg.trainer`: config.schema.TrainerConfig)."""
    for block in model.blocks:
        block.compile(mode=mode)
    model.loss_head.compile(mode=mode)  # the head and the loss too (LossHead)


def param_seed(seed: int, name: str) -> int:
    """A generator seed that depends only on the run seed and the parameter's name."""
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63)


def is_ffn_param(name: str) -> bool:
    return ".ffn." in name
