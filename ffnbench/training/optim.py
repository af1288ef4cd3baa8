"""The optimizer every run trains with: AdamW with decoupled weight decay on the matrices alone, and its linear
warmup + cosine schedule. The LightningModule and the benchmark's hand loop (ffnbench.bench) both build it here."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from ffnbench.config.schema import OptimConfig, optim_config
from ffnbench.model.model import GPT


def lr_factor(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """The lr factor of optimizer step `step` (0-based; a run takes steps 0 … total_steps − 1): linear warmup
    from 1/warmup_steps to 1 at step warmup_steps − 1 (step 0 without warmup), then cosine decay that reaches
    `min_ratio` exactly at the last step, total_steps − 1 (and stays there beyond it)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    peak = max(warmup_steps - 1, 0)  # the step at factor 1, where the cosine starts
    progress = min(1.0, (step - peak) / max(1, total_steps - 1 - peak))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build_optimizer(model: GPT, optim: OptimConfig | Mapping, total_steps: int, device: torch.device):
    """AdamW with weight decay only on the matrices that multiply activations (not on norms, biases or
    embeddings), and its warmup + cosine schedule (stepped once per optimizer step). The training module and
    the benchmark's reference loop (ffnbench.bench) both build it here, so they run the same optimizer.
    `optim` is `cfg.optim`, as an OptimConfig or as the mapping it is checked from."""
    o = optim if isinstance(optim, OptimConfig) else optim_config(optim)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (decay if p.ndim >= 2 and not name.startswith(("wte.", "wpe.")) else no_decay).append(p)
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": o.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=o.lr, betas=o.betas, eps=o.eps,
        fused=torch.device(device).type in ("cpu", "cuda") or None,  # one kernel for all parameters
    )
    warmup = min(o.warmup_steps, max(0, total_steps - 1))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, warmup, total_steps, o.min_lr_ratio)
    )
    return optimizer, scheduler
