"""The LightningModule: next-token loss, AdamW with warmup + cosine, clipping, validation with bits per
byte, FFN activation statistics, and divergence detection."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import lightning as L
import torch
import torch.distributed as dist

from ffnbench.config import OptimConfig, optim_config
from ffnbench.ffn import ActivationStats
from ffnbench.model import GPT, ModelConfig
from ffnbench.tokenizer import bits_per_byte


def lr_factor(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """Linear warmup from ~0 to 1 over `warmup_steps`, then cosine decay to `min_ratio` at `total_steps`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
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


class LMModule(L.LightningModule):
    def __init__(self, model_cfg: ModelConfig, optim: OptimConfig | Mapping, seed: int, total_steps: int,
                 tokens_per_step: int, val_bytes_per_token: float = 1.0, log_every: int = 10, compile: bool = False,
                 fingerprint: dict | None = None):
        super().__init__()
        self.model = GPT(model_cfg, seed=seed)
        if compile:
            for block in self.model.blocks:
                block.compile()  # in place: parameter names (and checkpoint keys) stay as they are
        self.optim = optim if isinstance(optim, OptimConfig) else optim_config(optim)
        self.total_steps = total_steps
        self.tokens_per_step = tokens_per_step
        self.val_bytes_per_token = val_bytes_per_token
        self.log_every = log_every
        self.fingerprint = fingerprint or {}
        self.status = "running"  # → "diverged" when the loss stops being finite (train() sets the rest)
        self.divergence: str | None = None  # why it diverged
        self.val_history: list[dict[str, Any]] = []
        self.last_train_loss: float | None = None
        self._val_sum = self._val_count = None

    # ---- training -----------------------------------------------------------------------------------

    def _logging_step(self) -> bool:
        """Whether this optimizer step's metrics reach the loggers: Lightning writes them on every log_every-th
        step (Trainer.log_every_n_steps = log_every, counted from 1: global steps 9, 19, ... for 10), and we read the
        loss on the last step too. Per-step metrics are logged on these steps only: on the others a `self.log` would
        cost Python work for a value nobody sees, and a device tensor in the progress bar a host sync per step."""
        step = self.global_step
        return (step + 1) % self.log_every == 0 or step + 1 >= self.total_steps

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = self.model(x, y)
        if self._logging_step():
            step = self.global_step
            value = loss.detach().float().item()  # the one host sync of a logging window
            self.last_train_loss = value
            if not math.isfinite(value):
                self._diverge(f"training loss became {value} at step {step}")
                return None  # skips backward and the optimizer step
            # Host values are logged as CPU tensors: Lightning converts the progress bar's metrics to numbers after
            # every step, which for a device tensor would be a sync on every step, logging window or not.
            self.log("train/loss", torch.tensor(value), on_step=True, on_epoch=False, prog_bar=True)
            self.log("tokens", torch.tensor(float((step + 1) * self.tokens_per_step)), on_step=True, on_epoch=False)
        return loss

    def _diverge(self, why: str) -> None:
        self.status = "diverged"
        self.divergence = why
        self.trainer.should_stop = True

    def on_before_optimizer_step(self, optimizer) -> None:
        clip = self.optim.grad_clip
        norm = torch.nn.utils.clip_grad_norm_(self.parameters(), clip if clip else math.inf)
        if self._logging_step():
            self.log("train/grad_norm", norm, on_step=True, on_epoch=False)  # stays on the device until written
            self.log("lr", torch.tensor(optimizer.param_groups[0]["lr"]), on_step=True, on_epoch=False)

    def configure_optimizers(self):
        optimizer, scheduler = build_optimizer(self.model, self.optim, self.total_steps, self.device)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # ---- validation ---------------------------------------------------------------------------------

    def on_validation_epoch_start(self) -> None:
        self._val_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self._val_count = torch.zeros((), dtype=torch.float64, device=self.device)
        for ffn in self.model.ffns:
            ffn.stats = ActivationStats(ffn.size.d_ff, self.device)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = self.model(x, y)
        self._val_sum += loss.double() * y.numel()
        self._val_count += y.numel()

    def on_validation_epoch_end(self) -> None:
        stats = [ffn.stats for ffn in self.model.ffns]
        for ffn in self.model.ffns:
            ffn.stats = None
        totals = torch.stack([self._val_sum, self._val_count])
        if dist.is_available() and dist.is_initialized():  # every rank saw its own shard: add them up
            dist.all_reduce(totals)
            for s in stats:
                s.all_reduce()
        val_loss = (totals[0] / totals[1].clamp(min=1)).item()
        per_layer = [s.summary() for s in stats]
        mean = {k: sum(layer[k] for layer in per_layer) / len(per_layer) for k in per_layer[0]}
        record = {
            "step": self.global_step,
            "tokens": self.global_step * self.tokens_per_step,
            "val_loss": val_loss,
            "val_bpb": bits_per_byte(val_loss, self.val_bytes_per_token),
            "ffn": {"mean": mean, "per_layer": per_layer},
        }
        if not self.val_history or self.val_history[-1]["step"] != record["step"]:
            self.val_history.append(record)
        metrics = {"val/loss": val_loss, "val/bpb": record["val_bpb"]}
        metrics.update({f"ffn/{k}": v for k, v in mean.items()})
        for i, layer in enumerate(per_layer):
            metrics.update({f"ffn/layer{i}/{k}": v for k, v in layer.items()})
        self.log_dict(metrics, on_step=False, on_epoch=True, sync_dist=False, rank_zero_only=True)
        if not math.isfinite(val_loss) and self.trainer.training:
            self._diverge(f"validation loss became {val_loss} at step {self.global_step}")

    # ---- checkpoints --------------------------------------------------------------------------------

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["ffnbench"] = {
            "fingerprint": self.fingerprint,
            "val_history": self.val_history,
            "status": self.status,
            "last_train_loss": self.last_train_loss,
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        saved = checkpoint.get("ffnbench", {})
        self.val_history = list(saved.get("val_history", []))
        self.last_train_loss = saved.get("last_train_loss")
