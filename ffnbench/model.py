"""The decoder-only language model: a pre-norm GPT in which only the FFN varies.

    x = wte[idx] + wpe[pos]
    for each block:  x = x + Attn(LN(x));  x = x + FFN(LN(x))
    logits = LN(x) · wteᵀ                       (tied output head)

Attention is causal multi-head attention through `scaled_dot_product_attention` (flash / memory-efficient
kernels on GPU). Initialisation is GPT-2's (N(0, 0.02), residual projections scaled by 1/√(2·n_layer)),
with one twist that makes comparisons fair: every parameter is drawn from its own generator seeded by
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
from ffnbench.ffn import FeedForward, FFNSpec, matched_output_gain

INIT_STD = 0.02
FFN_INITS = ("gpt2", "matched")  # model.ffn_init


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


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.dropout = cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.attn_bias)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.attn_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_head, d // self.n_head).permute(2, 0, 3, 1, 4)
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


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig, seed: int = 0):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, bias=cfg.attn_bias)
        self.reset_parameters(seed)

    @property
    def ffns(self) -> list[FeedForward]:
        return [block.ffn for block in self.blocks]

    @torch.no_grad()
    def reset_parameters(self, seed: int) -> None:
        """GPT-2 initialisation, each parameter from a generator seeded by (seed, its name). With
        ffn_init=matched the FFN output projections are then scaled by ffn.matched_output_gain (computed, not
        drawn: every other parameter, and the draws of the FFN's own, stay as they are)."""
        residual_std = INIT_STD / math.sqrt(2 * self.cfg.n_layer)
        ffn_gain = matched_output_gain(self.cfg.ffn, self.cfg.d_model, INIT_STD) if self.cfg.ffn_init == "matched" \
            else None
        for name, p in self.named_parameters():
            if name.endswith(".bias"):
                p.zero_()
            elif p.ndim == 1:  # LayerNorm gains
                p.fill_(1.0)
            else:
                std = residual_std if name.endswith(("attn.proj.weight", "ffn.w_down.weight")) else INIT_STD
                gen = torch.Generator().manual_seed(param_seed(seed, name))
                p.copy_(torch.randn(p.shape, generator=gen) * std)
                if ffn_gain is not None and name.endswith("ffn.w_down.weight"):
                    p.mul_(ffn_gain)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, V), or the mean next-token cross-entropy in nats when `targets` is given."""
        t = idx.shape[1]
        if t > self.cfg.seq_len:
            raise ConfigError(f"model.seq_len: got a sequence of {t} tokens, longer than seq_len={self.cfg.seq_len}")
        x = self.drop(self.wte(idx) + self.wpe.weight[:t])
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


# How `trainer.compile` compiles each block (torch.compile's `mode`). reduce-overhead also records each block's
# forward and backward as CUDA graphs: one launch instead of dozens of kernel launches, which is most of a small
# model's step on a GPU. CUDA only (train.check_run refuses it elsewhere).
COMPILE_MODES = ("default", "reduce-overhead")


def compile_blocks(model: GPT, mode: str = "default") -> None:
    """torch.compile every block of `model` in place, so parameter names (and checkpoint keys) stay as they are.
    The training module and the benchmark's reference loop both compile here, the same way (`mode` is checked
    with the rest of `cfg.trainer`: config.TrainerConfig)."""
    for block in model.blocks:
        block.compile(mode=mode)


def param_seed(seed: int, name: str) -> int:
    """A generator seed that depends only on the run seed and the parameter's name."""
    return (seed * 1_000_003 + zlib.crc32(name.encode())) % (2**63)


def is_ffn_param(name: str) -> bool:
    return ".ffn." in name
