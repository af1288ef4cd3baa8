"""Parameter and FLOP accounting, analytic, for any model config — and the check against torch.

Conventions (stated once, used everywhere):
- Parameters: tied embeddings are counted once. "Non-embedding" excludes the token and position
  embeddings (Kaplan et al. 2020); the tied output head is therefore not counted there either. A block's norms
  are its two LayerNorms over d_model and, with model.qk_norm, the query and key LayerNorms over head_dim: neither
  attention nor FFN, but non-embedding (they count toward a fixed budget).
- FLOPs: a multiply-add is 2 FLOPs. Forward FLOPs per token = 2·(matmul weights, including the tied
  head) + the attention term 2·2·T·d per layer (QKᵀ and A·V over the full context, as PaLM/nanoGPT count
  it and as torch's FlopCounterMode counts SDPA). Training = 3 × forward (backward is twice the forward).
  Biases, norms, softmax and activations are not counted: they are O(d) per token, not O(d²).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from ffnbench.errors import ConfigError
from ffnbench.model.ffn import FFNSpec, ffn_matmul_params, size_ffn
from ffnbench.model.model import GPT, ModelConfig


def attention_params(d_model: int, bias: bool) -> int:
    """Q, K, V and output projections: 4·d² weights (+ 4·d biases)."""
    return 4 * d_model * d_model + (4 * d_model if bias else 0)


def layernorm_params(d_model: int, bias: bool) -> int:
    return d_model * (2 if bias else 1)


def qk_norm_params(d_model: int, n_head: int, bias: bool, qk_norm: bool) -> int:
    """The query and key LayerNorms of one attention layer (model.qk_norm), over head_dim = d_model / n_head each;
    none without qk_norm."""
    return 2 * layernorm_params(d_model // n_head, bias) if qk_norm else 0


@dataclass(frozen=True)
class ParamBreakdown:
    embedding: int  # token embedding (= the tied output head)
    position: int
    attention_per_layer: int
    ffn_per_layer: int
    norms_per_layer: int  # the block's LayerNorms, qk_norm's included
    final_norm: int
    n_layer: int
    d_ff: int
    nominal_d_ff: float
    ffn_mismatch: float

    @property
    def block(self) -> int:
        return self.attention_per_layer + self.ffn_per_layer + self.norms_per_layer

    @property
    def non_embedding(self) -> int:
        return self.n_layer * self.block + self.final_norm

    @property
    def total(self) -> int:
        return self.embedding + self.position + self.non_embedding

    @property
    def ffn_total(self) -> int:
        return self.n_layer * self.ffn_per_layer

    @property
    def ffn_share(self) -> float:
        """FFN ÷ (FFN + attention) of one block: the documents' "FFN is 2/3 of a block"."""
        return self.ffn_per_layer / (self.ffn_per_layer + self.attention_per_layer)

    def as_dict(self) -> dict:
        out = asdict(self)
        for name in ("block", "non_embedding", "total", "ffn_total", "ffn_share"):
            out[name] = getattr(self, name)
        return out


def count_params(cfg: ModelConfig) -> ParamBreakdown:
    """Exact parameter counts of `GPT(cfg)`, without building it."""
    d, bias = cfg.d_model, cfg.attn_bias
    ffn = size_ffn(cfg.ffn, d)
    return ParamBreakdown(
        embedding=cfg.vocab_size * d,
        position=cfg.seq_len * d,
        attention_per_layer=attention_params(d, bias),
        ffn_per_layer=ffn.params,
        norms_per_layer=2 * layernorm_params(d, bias) + qk_norm_params(d, cfg.n_head, bias, cfg.qk_norm),
        final_norm=layernorm_params(d, bias),
        n_layer=cfg.n_layer,
        d_ff=ffn.d_ff,
        nominal_d_ff=ffn.nominal_d_ff,
        ffn_mismatch=ffn.mismatch,
    )


def ffn_forward_flops(n_tokens: int, d_model: int, d_ff: int, gated: bool) -> int:
    """Forward FLOPs of one FFN layer over n tokens: 2·n·(matmul weights) — 4·n·d·d_ff when ungated."""
    return 2 * n_tokens * ffn_matmul_params(d_model, d_ff, gated)


@dataclass(frozen=True)
class FlopBreakdown:
    seq_len: int
    matmul_params: int  # weights that multiply activations, tied head included
    ffn_forward_per_layer: int  # per token
    attention_forward_per_layer: int  # per token: projections + the context term
    head_forward: int  # per token
    forward: int  # per token, whole model
    training: int  # per token: forward + backward

    def as_dict(self) -> dict:
        return asdict(self)


def count_flops(cfg: ModelConfig, seq_len: int | None = None, causal: bool = False) -> FlopBreakdown:
    """Analytic FLOPs per token at context length `seq_len` (default: the model's). The attention context term
    (QKᵀ and A·V) counts every query against all T keys by default: the convention of the records' `flops` block, the
    cost views and FlopCounterMode on the math kernel. `causal=True` counts what a causal kernel computes, each
    query against the keys at or before it, (T + 1)/2 on average: what MFU divides by, so that a flash kernel
    skipping the masked half does not look twice as efficient there."""
    t = seq_len or cfg.seq_len
    d, L = cfg.d_model, cfg.n_layer
    d_ff = size_ffn(cfg.ffn, d).d_ff
    ffn_w = ffn_matmul_params(d, d_ff, cfg.ffn.gated)
    attn_w = attention_params(d, bias=False)
    head_w = cfg.vocab_size * d
    keys = (t + 1) / 2 if causal else t  # keys a query is multiplied with, on average
    context = round(2 * 2 * keys * d)  # QKᵀ and A·V: 2·keys·d multiply-adds each, per token
    matmul_params = L * (attn_w + ffn_w) + head_w
    forward = 2 * matmul_params + L * context
    return FlopBreakdown(
        seq_len=t,
        matmul_params=matmul_params,
        ffn_forward_per_layer=2 * ffn_w,
        attention_forward_per_layer=2 * attn_w + context,
        head_forward=2 * head_w,
        forward=forward,
        training=3 * forward,
    )


def measure_training_flops(model: GPT, batch_size: int = 2, seq_len: int | None = None) -> float:
    """Training FLOPs per token counted by torch's FlopCounterMode over one forward+backward.

    SDPA runs on its math backend here: torch has no FLOP formula for the CPU flash kernel, while the math
    backend decomposes into matmuls it does count (the full T×T product, as the analytic formula does)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    t = seq_len or model.cfg.seq_len
    idx = torch.randint(0, model.cfg.vocab_size, (batch_size, t))
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(idx, idx).backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / (batch_size * t)


def solve_d_model(
    non_embedding_params: float, n_layer: int, n_head: int, ffn: FFNSpec, attn_bias: bool = True,
    qk_norm: bool = False,
) -> tuple[int, float]:
    """Kaplan-style fixed budget: the d_model (a multiple of n_head) whose non-embedding parameter count
    is closest to the target for this FFN spec. Returns (d_model, relative mismatch)."""
    if non_embedding_params <= 0:
        raise ConfigError(f"model.non_embedding_params: must be positive, got {non_embedding_params!r}")

    def params_at(d: int) -> int:  # qk_norm's added by hand: the search passes heads too narrow for it (ModelConfig)
        return count_params(
            ModelConfig(vocab_size=1, seq_len=1, d_model=d, n_layer=n_layer, n_head=n_head,
                        attn_bias=attn_bias, ffn=ffn)
        ).non_embedding + n_layer * qk_norm_params(d, n_head, attn_bias, qk_norm)

    d = n_head
    while params_at(d + n_head) < non_embedding_params:
        d += n_head
    best = min((d, d + n_head), key=lambda c: abs(params_at(c) - non_embedding_params))
    return best, (params_at(best) - non_embedding_params) / non_embedding_params


def bytes_of(n_params: int, bytes_per_param: int = 4) -> int:
    return n_params * bytes_per_param
