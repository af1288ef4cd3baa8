"""The LightningModule: next-token loss, the optimizer of optim.py, clipping, validation with bits per byte, FFN
activation statistics, and divergence detection."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.fabric.plugins.precision.amp import _optimizer_handles_unscaling

from ffnbench.config.schema import OptimConfig, optim_config
from ffnbench.data.tokenizer import bits_per_byte
from ffnbench.model.ffn import ActivationStats
from ffnbench.model.model import GPT, ModelConfig, compile_blocks
from ffnbench.runs.migrate import migrate_checkpoint
from ffnbench.training.loggers import log_row
from ffnbench.training.optim import build_optimizer
from ffnbench.training.readout import Readout, defers
from ffnbench.training.step import NO_CONTEXT, clip_gradients, train_step


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _gather_in_rank_order(local: torch.Tensor) -> torch.Tensor:
    """The ranks' 1-d tensors (of possibly different lengths), concatenated in rank order on every rank."""
    if not _distributed():
        return local.cpu()
    sizes = [torch.zeros(1, dtype=torch.long, device=local.device) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, torch.tensor([local.numel()], device=local.device))
    longest = int(max(s.item() for s in sizes))
    padded = torch.zeros(longest, dtype=local.dtype, device=local.device)
    padded[:local.numel()] = local
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded)
    return torch.cat([p[:int(n.item())] for p, n in zip(parts, sizes, strict=True)]).cpu()


def _reduced_loss(loss: torch.Tensor) -> torch.Tensor:
    """[the training loss averaged over the ranks, how many ranks' loss is not finite], on the device: one all-reduce
    of two numbers under DDP (it queues like any kernel), none in a single process. Each rank's loss is the mean over
    its equal share of the global batch, so their mean is the global batch's loss: what a single process logs for the
    same batch, so the logged curve, and the spikes read off it, do not depend on the device count. Every rank reads
    the same sum, so every rank stops at the same step on a non-finite loss (one that returned before its backward
    would leave the others waiting in the gradient all-reduce forever)."""
    local = loss.detach().float().reshape(1)
    both = torch.cat([local, (~torch.isfinite(local)).float()])
    if _distributed():
        dist.all_reduce(both)
        both[0] /= dist.get_world_size()
    return both


NONFINITE = "_nonfinite_ranks"  # a deferred row's count of ranks whose loss was not finite: read, not logged


class LMModule(L.LightningModule):
    def __init__(self, model_cfg: ModelConfig, optim: OptimConfig | Mapping, seed: int, total_steps: int,
                 tokens_per_step: int, val_bytes_per_token: float = 1.0, log_every: int = 10, compile: bool = False,
                 fingerprint: dict | None = None, compile_mode: str = "default", val_every: int | None = None,
                 loss_chunk: int | None = None):
        super().__init__()
        self.model = GPT(model_cfg, seed=seed, loss_chunk=loss_chunk)  # loss_chunk: trainer.loss_chunk
        if compile:
            compile_blocks(self.model, compile_mode)
        # CUDA graphs are replayed into the same memory: each training step tells them it starts (step.train_step).
        self.cuda_graphs = compile and compile_mode == "reduce-overhead"
        self.optim = optim if isinstance(optim, OptimConfig) else optim_config(optim)
        self.total_steps = total_steps
        self.tokens_per_step = tokens_per_step
        self.val_bytes_per_token = val_bytes_per_token
        self.log_every = log_every
        self.val_every = val_every  # the steps fit validates at (multiples of it); None: whenever Lightning says
        self._skip_validation = False
        self.fingerprint = fingerprint or {}
        self.status = "running"  # → "diverged" when the loss stops being finite (train() sets the rest)
        self.divergence: str | None = None  # why it diverged
        self.val_history: list[dict[str, Any]] = []
        self.last_train_loss: float | None = None
        self.train_history: list[tuple[int, float]] = []  # (step, training loss) at each logging step: spikes
        self._val_sum = self._val_count = None
        self._row: dict[str, Any] = {}  # this logging step's training metrics (log_step), written at the step's end
        self._row_step = 0
        self._pending: tuple[int, Readout] | None = None  # (step, row) written at the next batch's end (deferred)
        self._defer = False  # whether rows are read a batch late (on_train_start: on a GPU; ffnbench.training.readout)
        self._params: list[torch.nn.Parameter] | None = None  # what clipping walks, listed once
        self.automatic_optimization = False  # training_step takes several optimizer steps (its docstring)

    def __setattr__(self, name: str, value: Any) -> None:
        # Lightning sets `_current_fx_name` around every hook it calls, about 40 times a step; nn.Module.__setattr__
        # spends microseconds on each, checking whether a string is a parameter, a buffer or a submodule.
        if name == "_current_fx_name":
            object.__setattr__(self, name, value)
        else:
            super().__setattr__(name, value)

    # ---- training -----------------------------------------------------------------------------------

    def _logging_step(self, step: int) -> bool:
        """Whether optimizer step `step` logs its metrics: every log_every-th step (counted from 1: global steps 9,
        19, ... for 10) and the last, each the last step of its batch (inner_steps divides log_every). Only these
        steps read a value back from the device (the loss, then the row's tensors when it is written) or do any
        logging work; the steps between them pay nothing for it."""
        return (step + 1) % self.log_every == 0 or step + 1 >= self.total_steps

    def log_step(self, metrics: Mapping[str, Any]) -> None:
        """Add `metrics` (numbers, or 0-d tensors read on the logging step) to this logging step's row of training
        metrics, which on_train_batch_end writes to the loggers once (loggers.log_row). The module and the
        ThroughputMonitor fill it; on the steps between two logging steps nothing is logged, so nothing is paid."""
        self._row.update(metrics)

    def training_step(self, batch, batch_idx):
        """One optimizer step per batch of `batch`, in order: it stacks the batches of up to trainer.inner_steps
        consecutive steps ([k, batch, seq_len] each; data.batches.TrainBatches). Each step is what Lightning's
        automatic optimization did for one batch (forward, backward, clipping in on_before_optimizer_step, AdamW,
        the schedule), the same arithmetic in the same order; Lightning's fixed work per batch (its hooks, loop
        bookkeeping, the validation and checkpoint checks) is paid once per k steps. manual_backward and the
        LightningOptimizer keep the precision plugin (loss scaling) and DDP (a gradient all-reduce per backward)."""
        optimizer, scheduler = self.optimizers(), self.lr_schedulers()
        # Lightning runs training_step under the precision's autocast (bf16/fp16 on a GPU); its automatic optimization
        # ran backward and the optimizer step outside it, and so does this loop.
        device = self.device.type
        outside_autocast = torch.autocast(device, enabled=False) if torch.is_autocast_enabled(device) else NO_CONTEXT
        for step, (x, y) in enumerate(zip(*batch, strict=True), start=self.global_step):
            if step >= self.total_steps:  # the run ends inside this batch
                break
            loss = train_step(self.model, x, y, optimizer=optimizer, scheduler=scheduler,
                              backward=self.manual_backward,
                              step=optimizer.step,  # counts the step (global_step); its hook clips (below)
                              z_loss=self.optim.z_loss, cuda_graphs=self.cuda_graphs, update_context=outside_autocast,
                              read_loss=(lambda loss, step=step: self._read_loss(step, loss))
                              if self._logging_step(step) else None)
            if loss is None:
                return  # no backward, no optimizer step: on every rank alike, so none waits in an all-reduce

    def _read_loss(self, step: int, loss: torch.Tensor) -> bool:
        """A logging step's loss into its row: read now (on a CPU), or with the row a batch later (deferred reads: no
        wait for the device here). Returns whether the run diverged (read now, and not finite on some rank)."""
        self._row_step = step
        tokens = (step + 1) * self.tokens_per_step
        reduced = _reduced_loss(loss)
        if self._defer:
            self.log_step({"train/loss": reduced[0], "tokens": tokens, NONFINITE: reduced[1]})
            return False
        value, bad = reduced.tolist()  # the one host read of a logging window
        if self._record_loss(step, value, int(bad)):
            return True
        self.log_step({"train/loss": value, "tokens": tokens})
        return False

    def _record_loss(self, step: int, value: float, bad_ranks: int) -> bool:
        """Keep a logging step's training loss (`value`: the mean over the ranks; last_train_loss, train_history); stop
        the run if it is not finite on some rank (`bad_ranks` of them). Returns whether the run diverged."""
        if not self.train_history or self.train_history[-1][0] < step:  # a checkpoint may have read it already
            self.last_train_loss = value  # also what the progress bar shows (callbacks.StepProgressBar)
            self.train_history.append((step, value))
        if bad_ranks:
            what = f"non-finite on {bad_ranks} of {dist.get_world_size()} ranks" if _distributed() else value
            self._diverge(f"training loss became {what} at step {step}")
        return bool(bad_ranks)

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        # After the callbacks' on_train_batch_end (Lightning calls the module's last): the ThroughputMonitor's
        # figures of this batch's last step are in the row.
        row = self._close_row()
        if not self._defer:
            if row is not None:
                self._write(row)
            return
        # Deferred: the row the previous batch left is read now, with this batch's steps queued behind it, so the
        # device has work while the host waits for that row (read at this batch's start, before any of its work, the
        # wait would drain the queue); this batch's row waits in turn for the next batch's steps. A non-finite loss
        # stops the run here (should_stop), after the batch that followed it.
        older, self._pending = self._pending, row
        if older is not None:
            self._write(older)

    def _close_row(self) -> tuple[int, Readout] | None:
        """This logging step's row (log_step), copied for reading (ffnbench.training.readout) and emptied; None on a
        batch that does not log."""
        if not self._row:
            return None
        self._row.setdefault("epoch", self.trainer.current_epoch)  # the epoch of the step, not of the write
        row = (self._row_step, Readout(self._row))
        self._row.clear()
        return row

    def _write(self, row: tuple[int, Readout]) -> bool:
        """Read a row and write it to the loggers (loggers.log_row); a deferred row's loss is kept and acted on here
        (read at once, it was in _read_loss). Returns whether the run diverged."""
        step, readout = row
        values = readout.read()
        bad = values.pop(NONFINITE, None)
        log_row(self.trainer, values, step)
        return bad is not None and "train/loss" in values and self._record_loss(step, values["train/loss"], int(bad))

    def settle(self) -> bool:
        """Read and write the row a deferred batch left, now (where it is needed: the training rows come before the
        validation's, and fit's end), and act on its loss. Every rank settles at the same point of its loop (train()
        settles once more after fit, so the record has every loss whatever stopped it). Returns whether the run
        diverged."""
        if self._pending is None:
            return False
        row, self._pending = self._pending, None
        return self._write(row)

    def flush_rows(self) -> None:
        """Write every training row up to the current step, now: the deferred one and the row of the batch that is
        ending (a checkpoint is taken in the callbacks' on_train_batch_end, before the module's). A checkpoint calls
        it before it saves the loggers, so their files and W&B hold every row up to its step (a resume does not log
        those steps again). A checkpoint waits for the device anyway (it copies the weights to the host)."""
        self.settle()
        row = self._close_row()
        if row is not None:
            self._write(row)

    def on_validation_start(self) -> None:
        self.settle()  # the training rows come before the validation's, as the steps do

    def on_train_end(self) -> None:
        self.settle()

    def _diverge(self, why: str) -> None:
        if self.status != "diverged":  # the first cause: a NaN loss leaves the validation that follows NaN too
            self.status = "diverged"
            self.divergence = why
        self.trainer.should_stop = True

    def on_train_start(self) -> None:
        self._defer = defers(self.device)
        # A run that diverged in the validation before fit (step 0) trains no further: fit resets should_stop.
        if self.status == "diverged":
            self.trainer.should_stop = True

    def on_before_optimizer_step(self, optimizer) -> None:
        scaler = getattr(self.trainer.precision_plugin, "scaler", None)
        if scaler is not None and _optimizer_handles_unscaling(optimizer):
            # 16-mixed: Lightning leaves a fused AdamW to unscale inside its step, after this hook, so the gradient
            # here is still × the loss scale. Unscale it now (the scaler's step then passes no scale to the fused
            # kernel, and still skips a step with inf/NaN), so clipping and the logged norm see the true gradient.
            scaler.unscale_(optimizer)
        norm = clip_gradients(self._params, self.optim.grad_clip)
        if self._row:  # a logging step (training_step started its row)
            self.log_step({"train/grad_norm": norm,  # stays on the device until the row is written
                           "lr": optimizer.param_groups[0]["lr"]})

    def configure_optimizers(self):
        self._params = list(self.parameters())  # the order clip_grad_norm_ has always walked them in
        optimizer, scheduler = build_optimizer(self.model, self.optim, self.total_steps, self.device)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # ---- validation ---------------------------------------------------------------------------------

    def on_validation_epoch_start(self) -> None:
        # Lightning counts batches, and a run whose length is not a multiple of inner_steps ends inside a short last
        # batch, which it may count as the batch of a validation: fit validates at multiples of val_every only (or
        # when the run stops early), so that one is skipped (the final validation follows at once).
        self._skip_validation = (self.val_every is not None and self.trainer.state.fn == "fit"
                                 and self.global_step % self.val_every != 0 and not self.trainer.should_stop)
        if self._skip_validation:
            return
        zero = lambda: torch.zeros((), dtype=torch.float64, device=self.device)
        self._val_sum, self._val_count = zero(), zero()
        self._final_sum, self._final_count = zero(), zero()  # the final set's (data.final_val_tokens) ...
        self._final_windows: list[torch.Tensor] = []  # ... and its mean loss per window, in order
        for ffn in self.model.ffns:
            ffn.stats = ActivationStats(ffn.size.d_ff, self.device)

    def validation_step(self, batch, batch_idx):
        if self._skip_validation:
            return
        x, y, *final = batch  # a batch of the final set carries a marker (data.batches.FINAL_MARK)
        # Both sets take one path, each token's loss (chunked where the loss is: model.LossHead), and a compiled model
        # evaluates eager: dynamo guards on the grad mode, so a compiled evaluation would be a second graph for every
        # compiled function (a recompile a run, and its compile time, for ~3% of a GPU run's FLOPs: docs/runs.md,
        # Compile).
        with torch.compiler.set_stance("force_eager"):
            per_token = self.model(x, y, reduction="none")
        if not final:
            self._val_sum += per_token.double().sum()
            self._val_count += y.numel()
            return
        self._final_sum += per_token.double().sum()
        self._final_count += y.numel()
        self._final_windows.append(per_token.view(y.shape).double().mean(dim=1))

    def on_validation_epoch_end(self) -> None:
        if self._skip_validation:
            self._skip_validation = False
            return
        stats = [ffn.stats for ffn in self.model.ffns]
        for ffn in self.model.ffns:
            ffn.stats = None
        totals = torch.stack([self._val_sum, self._val_count, self._final_sum, self._final_count])
        if _distributed():  # every rank saw its own shard: add them up
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
        if totals[3] > 0:
            record["final"] = self._final_record((totals[2] / totals[3]).item())
        if not self.val_history or self.val_history[-1]["step"] != record["step"]:
            self.val_history.append(record)
        elif "final" in record:  # the final validation at the step fit validated last: the same periodic loss
            self.val_history[-1] = record
        self._log_validation(record)
        # Any validation counts, in fit or not: inside fit `trainer.training` is False while validating, so testing it
        # (as this once did) let a loss that is NaN only in validation pass as a finished run without a loss.
        for loss in (val_loss, record.get("final", {}).get("val_loss", 0.0)):
            if not math.isfinite(loss):
                self._diverge(f"validation loss became {loss} at step {self.global_step}")
                break

    def _final_record(self, loss: float) -> dict[str, Any]:
        """The final set's loss, bits per byte and per-window losses (gathered from every rank, in rank order:
        each rank holds a contiguous share of the windows)."""
        local = torch.cat(self._final_windows) if self._final_windows else torch.zeros(0, dtype=torch.float64,
                                                                                         device=self.device)
        windows = _gather_in_rank_order(local)
        bytes_per_token = getattr(self.trainer.datamodule, "final_val_bytes_per_token", None) \
            or self.val_bytes_per_token
        return {"val_loss": loss, "val_bpb": bits_per_byte(loss, bytes_per_token), "windows": windows.tolist()}

    def _log_validation(self, record: dict[str, Any]) -> None:
        # `step`: Lightning takes a logged metric of that name as the row's step, so the validation after k steps is
        # logged at k, as result.json's curve has it (not at k - 1, the index of the batch that ended there).
        # `tokens`: the x-axis of every W&B panel (loggers.define_wandb_metrics), on validation rows too.
        metrics = {"step": float(record["step"]), "tokens": float(record["tokens"]),
                   "val/loss": record["val_loss"], "val/bpb": record["val_bpb"]}
        if "final" in record:
            metrics.update({"val/final_loss": record["final"]["val_loss"], "val/final_bpb": record["final"]["val_bpb"]})
        metrics.update({f"ffn/{k}": v for k, v in record["ffn"]["mean"].items()})
        for i, layer in enumerate(record["ffn"]["per_layer"]):
            metrics.update({f"ffn/layer{i}/{k}": v for k, v in layer.items()})
        self.log_dict(metrics, on_step=False, on_epoch=True, sync_dist=False, rank_zero_only=True)

    # ---- checkpoints --------------------------------------------------------------------------------

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # The checkpoint holds every logging step's loss up to its step (PeriodicCheckpoint flushed the rows before it
        # saved the loggers; a checkpoint written another way flushes them here).
        self.flush_rows()
        checkpoint["ffnbench"] = {
            "fingerprint": self.fingerprint,
            "val_history": self.val_history,
            "status": self.status,
            "last_train_loss": self.last_train_loss,
            "train_history": self.train_history,
        }

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        migrate_checkpoint(checkpoint, getattr(self.trainer.datamodule, "inner_steps", 1))
        saved = checkpoint.get("ffnbench", {})
        self.val_history = list(saved.get("val_history", []))
        self.last_train_loss = saved.get("last_train_loss")
        self.train_history = [(int(s), float(v)) for s, v in saved.get("train_history", [])]
