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
- scaled: fan_in with a gain g (`init_gain`): every matrix N(0, g²/fan_in), the same residual scaling and embedding
  rule, so g = 1 is fan_in draw for draw. The FFN's input is a unit-RMS LayerNorm output, so its pre-activations
  start at std ≈ g whatever the width: g places a small model where a published one starts (GPT-2 small and
  BERT-base, N(0, 0.02) at d_model 768: 0.02·√768 ≈ 0.55; LLaMA-7B at 4096: ≈ 1.28), which gpt2's fixed 0.02 at
  d_model 64 (≈ 0.16) does not.
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
from ffnbench.model.ffn import MATCHED_REFERENCE, FeedForward, FFNSpec, matched_output_gain, size_ffn

INIT_STD = 0.02
FFN_INITS = ("gpt2", "matched")  # model.ffn_init
INITS = ("gpt2", "fan_in", "scaled")  # model.init
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
    init: str = "gpt2"  # gpt2: N(0, 0.02) everywhere | fan_in: N(0, 1/fan_in) | scaled: N(0, g²/fan_in) (module doc)
    init_gain: float = 1.0  # g of init=scaled; the other inits take only 1.0
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
            raise ConfigError(f"model.init: expected {', '.join(INITS[:-1])} or {INITS[-1]}, got {self.init!r}")
        if isinstance(self.init_gain, bool) or not isinstance(self.init_gain, int | float) \
                or not math.isfinite(self.init_gain) or self.init_gain <= 0:
            raise ConfigError(f"model.init_gain: must be a positive number, got {self.init_gain!r}")
        if self.init != "scaled" and self.init_gain != 1.0:
            raise ConfigError(f"model.init_gain: {self.init_gain!r} scales only model.init=scaled (got init="
                              f"{self.init}); add model.init=scaled or drop the gain")
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


# The automatic chunk of the loss (LossHead, trainer.loss_chunk=null): as many tokens as make about this many logits,
# 2²⁴ (64 MiB in fp32): 2048 tokens of an 8192-token vocabulary, 65536 of the byte-level 256.
LOSS_CHUNK_LOGITS = 2**24
# ∂/∂wte sums ∂/∂logits · h over a chunk's tokens, in the matmul's dtype: in fp16 (max 65,504) a chunk of 65,536
# tokens whose LayerNorm outputs share a component of a few units overflows it, and no loss scale can help (the sum
# is taken before the scale is applied). In fp16 it is summed this many tokens at a time, each part added in fp32.
FP16_WTE_TOKENS = 1024


def token_losses(h: torch.Tensor, wte: torch.Tensor, targets: torch.Tensor, chunk: int) -> tuple[torch.Tensor,
                                                                                                  torch.Tensor]:
    """Per token, the cross-entropy and the logsumexp of the tied head's logits h·wteᵀ, computed `chunk` tokens at a
    time: (N,) each, in fp32, for h (N, D) and targets (N,).

        logits = h·wteᵀ (fp32)     lse = log Σ_v exp(logits_v)     ce = lse − logits[target]

    Why chunks: the logits are tokens × vocab, the largest tensor of a step (8192 tokens × an 8192-token BPE
    vocabulary is 256 MiB in fp32), and everything the loss needs from them is these two numbers per token. Only one
    chunk's logits exist at a time. No gradient flows through here (validation); training goes through
    ChunkedHeadLoss, which needs the same numbers and the gradient besides."""
    ce, lse = [], []
    for h_c, t_c in zip(h.split(chunk), targets.split(chunk), strict=True):
        logits = F.linear(h_c, wte).float()
        lse_c = torch.logsumexp(logits, dim=-1)
        ce.append(lse_c - logits.gather(1, t_c[:, None]).squeeze(1))
        lse.append(lse_c)
    return torch.cat(ce), torch.cat(lse)


class ChunkedHeadLoss(torch.autograd.Function):
    """mean(ce) + z_loss·mean(lse²) of the tied head (token_losses), whose backward never holds the logits.

    The forward computes the gradient too, chunk by chunk, while each chunk's logits exist (the fused linear
    cross-entropy of Liger-Kernel and others): with p = softmax(logits) and y the one-hot target,

        ∂(ce + z·lse²)/∂logits = p·(1 + 2z·lse) − y       ∂/∂h = that·wte       ∂/∂wte = thatᵀ·h

    and keeps only ∂/∂h (N × D) and ∂/∂wte (V × D), which the backward scales by the incoming gradient. A backward that
    recomputed the logits instead would cost one more head matmul per step; autograd through the chunks would keep
    every chunk's logits (and their log-softmax) for the backward, the full tensor again.
    The matmuls run in `dtype` (autocast's bf16/fp16 on a GPU, as the plain head's F.linear does under autocast), the
    softmax and the sums in fp32; ∂/∂logits is taken per token (values of order 1, which fp16 holds) and divided by
    the token count only in the fp32 sums, and ∂/∂wte is summed over the chunks in fp32."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, wte: torch.Tensor, targets: torch.Tensor, chunk: int, z_loss: float,
                dtype: torch.dtype) -> torch.Tensor:
        w = wte.to(dtype)
        n = targets.numel()
        grad_h, grad_w = torch.empty_like(h), torch.zeros_like(wte, dtype=torch.float32)
        loss = h.new_zeros((), dtype=torch.float32)
        for start in range(0, n, chunk):
            h_c, t_c = h[start:start + chunk].to(dtype), targets[start:start + chunk]
            logits = F.linear(h_c, w).float()
            lse = torch.logsumexp(logits, dim=-1)
            ce = lse - logits.gather(1, t_c[:, None]).squeeze(1)
            d = torch.exp(logits - lse[:, None])  # p
            if z_loss:
                ce = ce + z_loss * lse.square()
                d.mul_((1 + 2 * z_loss * lse)[:, None])
            loss = loss + ce.sum()
            d.scatter_add_(1, t_c[:, None], d.new_full((t_c.numel(), 1), -1.0))  # − y
            d = d.to(dtype)
            grad_h[start:start + chunk] = (d @ w).float().div_(n).to(h.dtype)
            step = FP16_WTE_TOKENS if dtype == torch.float16 else len(t_c)
            for part in range(0, len(t_c), step):
                grad_w += (d[part:part + step].t() @ h_c[part:part + step]).float()
        ctx.save_for_backward(grad_h, grad_w.div_(n).to(wte.dtype))
        return loss / n

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * grad, grad_w * grad, None, None, None, None


def chunked_loss(h: torch.Tensor, wte: torch.Tensor, targets: torch.Tensor, chunk: int, z_loss: float = 0.0,
                 reduction: str = "mean") -> torch.Tensor:
    """The tied head's loss on final hidden states h (N, D) without ever building the (N, vocab) logits: the mean
    cross-entropy plus z_loss·mean(lse²) (reduction="mean"), or each token's cross-entropy (reduction="none", no
    gradient: the final validation's per-window losses). Equal to F.cross_entropy on the full fp32 logits up to the
    order of the sums (tests/model/test_chunked_loss.py states the tolerance). The matmul runs in autocast's dtype where
    autocast is on, as the plain F.linear would."""
    device = h.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else \
        torch.promote_types(h.dtype, wte.dtype)
    if reduction == "none":
        if torch.is_grad_enabled() and (h.requires_grad or wte.requires_grad):
            raise ValueError("chunked_loss(reduction='none') has no gradient; call it under torch.no_grad()")
        return token_losses(h.to(dtype), wte.to(dtype), targets, chunk)[0]
    if reduction != "mean":
        raise ValueError(f"chunked_loss: reduction must be 'mean' or 'none', got {reduction!r}")
    if torch.is_grad_enabled() and (h.requires_grad or wte.requires_grad):
        return ChunkedHeadLoss.apply(h, wte, targets, chunk, float(z_loss), dtype)
    ce, lse = token_losses(h.to(dtype), wte.to(dtype), targets, chunk)
    return ce.mean() + z_loss * lse.square().mean() if z_loss else ce.mean()


class LossHead(nn.Module):
    """The final LayerNorm, the tied output head and the loss, as one parameterless module over the parameters it is
    handed (they stay GPT's own: names, init and checkpoint keys are unchanged). A module of its own so that
    `compile_blocks` compiles it with the blocks.

    `chunk` (trainer.loss_chunk): tokens per chunk of the loss (chunked_loss), so that no (tokens × vocab) fp32
    logits are built, nor kept for the backward. None chooses: chunks of LOSS_CHUNK_LOGITS logits where the loss is
    compiled or on an accelerator, where memory and bandwidth are what the head costs; an eager run on the CPU
    computes it as it always did, LayerNorm, F.linear and F.cross_entropy on the full logits, so that its losses stay
    bit for bit what they were (chunking changes the order of the sums, hence the last bits)."""

    def __init__(self, eps: float = 1e-5, chunk: int | None = None):
        super().__init__()
        self.eps = eps
        self.chunk = chunk

    def tokens_per_chunk(self, x: torch.Tensor, vocab: int) -> int | None:
        """The chunk this call uses (class docstring): None for the plain, unchunked loss."""
        if self.chunk is not None:
            return self.chunk
        if x.device.type == "cpu" and not torch.compiler.is_compiling():
            return None
        return max(1, LOSS_CHUNK_LOGITS // vocab)

    def forward(self, x: torch.Tensor, ln_weight: torch.Tensor, ln_bias: torch.Tensor | None, wte: torch.Tensor,
                targets: torch.Tensor, z_loss: float = 0.0, reduction: str = "mean") -> torch.Tensor:
        h = F.layer_norm(x, (x.size(-1),), ln_weight, ln_bias, self.eps)
        chunk = self.tokens_per_chunk(x, wte.size(0))
        if chunk is not None:
            return chunked_loss(h.reshape(-1, h.size(-1)), wte, targets.reshape(-1), chunk, z_loss, reduction)
        # the plain loss on the full logits, every expression as it always was
        logits = F.linear(h, wte)
        flat = logits.float().view(-1, logits.size(-1))
        if reduction == "none":
            return F.cross_entropy(flat, targets.reshape(-1), reduction="none")
        if not z_loss:
            return F.cross_entropy(flat, targets.reshape(-1))
        return F.cross_entropy(flat, targets.reshape(-1)) + z_loss * torch.logsumexp(flat, -1).square().mean()


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig, seed: int = 0, loss_chunk: int | None = None):
        """Args:
            cfg: the architecture.
            seed: the init's seed (reset_parameters).
            loss_chunk: tokens per chunk of the loss (trainer.loss_chunk; None: LossHead chooses)."""
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, bias=cfg.attn_bias)
        self.loss_head = LossHead(self.ln_f.eps, loss_chunk)  # no parameters of its own
        self.reset_parameters(seed)

    @property
    def ffns(self) -> list[FeedForward]:
        return [block.ffn for block in self.blocks]

    @torch.no_grad()
    def reset_parameters(self, seed: int) -> None:
        """GPT-2 (init=gpt2) or fan-in (init=fan_in, or scaled with its gain) initialisation, each parameter from a
        generator seeded by (seed, its name). With ffn_init=matched the FFN output projections are then scaled by
        ffn.matched_output_gain (computed, not drawn: every other parameter, and the draws of the FFN's own, stay as
        they are)."""
        gain = None
        if self.cfg.ffn_init == "matched":
            gain = self._fan_in_matched_gain() if self.cfg.init != "gpt2" else \
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
        vectors they hand on), the residual projections also times 1/√(2·n_layer). scaled: fan_in's times init_gain."""
        residual = name.endswith(RESIDUAL_PROJECTIONS)
        if self.cfg.init == "gpt2":
            return INIT_STD / math.sqrt(2 * self.cfg.n_layer) if residual else INIT_STD
        fan_in = self.cfg.d_model if name in ("wte.weight", "wpe.weight") else p.shape[1]
        std = 1 / math.sqrt(fan_in) * (1 / math.sqrt(2 * self.cfg.n_layer) if residual else 1.0)
        return std * self.cfg.init_gain if self.cfg.init == "scaled" else std

    def _fan_in_matched_gain(self) -> float:
        """ffn_init=matched under init=fan_in or scaled: the factor that gives this FFN the output variance at init of
        the GPT-2 FFN (MATCHED_REFERENCE) initialised the same way. The pre-activations are N(0, g²) (a unit-RMS
        LayerNorm output times weights of variance g²/d_model): matched_output_gain's init_std·√d_model = g. Its output
        variance d_ff·E[h²]·std(w_down)² assumes a std(w_down) common to both FFNs; here std(w_down)² ∝ 1/d_ff,
        so the ratio of the two d_ff it divides by comes back in: the gain is √(E_ref[h²] / E[h²])."""
        d, spec = self.cfg.d_model, self.cfg.ffn
        g = self.cfg.init_gain if self.cfg.init == "scaled" else 1.0  # pre-activations N(0, g²)
        gain = matched_output_gain(spec, d, g / math.sqrt(d))
        return gain * math.sqrt(size_ffn(spec, d).d_ff / size_ffn(MATCHED_REFERENCE, d).d_ff)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, z_loss: float = 0.0,
                reduction: str = "mean") -> torch.Tensor:
        """Logits (B, T, V), or the mean next-token cross-entropy in nats when `targets` is given — plus, with
        `z_loss` > 0, PaLM's auxiliary z_loss·mean(logsumexp(logits)²) over the tokens, which keeps the softmax's
        normaliser near 1 (the training loss of optim.z_loss; validation asks for the cross-entropy alone). With
        reduction="none", each token's cross-entropy (B·T,), for the final validation's per-window losses. The loss
        is the LossHead's, chunked where it pays (LossHead); only a call without targets builds the full logits."""
        t = idx.shape[1]
        if t > self.cfg.seq_len:
            raise ConfigError(f"model.seq_len: got a sequence of {t} tokens, longer than seq_len={self.cfg.seq_len}")
        x = self.drop(self.wte(idx) + self.wpe.weight[:t])
        for block in self.blocks:
            x = block(x)
        if targets is not None:
            if not z_loss and reduction == "mean":  # the call of a run without z-loss, as it always was
                return self.loss_head(x, self.ln_f.weight, self.ln_f.bias, self.wte.weight, targets)
            return self.loss_head(x, self.ln_f.weight, self.ln_f.bias, self.wte.weight, targets, z_loss, reduction)
        return F.linear(self.ln_f(x), self.wte.weight)  # tied head


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
