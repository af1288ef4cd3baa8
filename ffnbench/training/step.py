"""One optimizer step, written once: the training module (LMModule.training_step) and the benchmarks' hand-written
loop (bench: HandLoop) both call `train_step`, so the benchmark's comparison measures only what sits around the step
(Lightning's hooks, logging, data), never two copies of the arithmetic that could drift apart.

What differs between the two callers is passed in: how the loss is backpropagated (Lightning's manual_backward, with
its precision plugin and DDP, or a GradScaler), how the optimizer steps (Lightning's optimizer wrapper, whose hook
clips, or unscale + clip + scaler step), and the autocast around the forward."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable
from typing import Any

import torch

NO_CONTEXT = contextlib.nullcontext()


def clip_gradients(params: Iterable[torch.nn.Parameter], max_norm: float | None) -> torch.Tensor:
    """Clip the gradients' global norm to `max_norm` (no clipping for 0 or None) and return the norm before it."""
    return torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm else math.inf)


def train_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *, optimizer: torch.optim.Optimizer | Any,
               scheduler: Any, backward: Callable[[torch.Tensor], None], step: Callable[[], None], z_loss: float = 0.0,
               cuda_graphs: bool = False, forward_context: Any = NO_CONTEXT, update_context: Any = NO_CONTEXT,
               read_loss: Callable[[torch.Tensor], bool] | None = None) -> torch.Tensor | None:
    """Forward, backward, optimizer step (clipping inside it), zero_grad, the schedule's step: one optimizer step.

    Args:
        model: the GPT; called as model(x, y) (with z_loss=... where optim.z_loss is set: PaLM's auxiliary term).
        x, y: the step's input and target tokens.
        optimizer: its zero_grad is called after the step.
        scheduler: stepped once per optimizer step.
        backward: backpropagates the loss (scaled, and all-reduced under DDP, where the caller's backward does so).
        step: takes the optimizer step, clipping first (LMModule: Lightning's optimizer wrapper, whose
            on_before_optimizer_step clips; HandLoop: unscale, clip_gradients, the scaler's step and update).
        z_loss: optim.z_loss; 0 leaves the call the plain model(x, y).
        cuda_graphs: compiled with CUDA graphs (reduce-overhead): tell them a new step starts.
        forward_context: around the forward (HandLoop's autocast; LMModule's forward is inside Lightning's).
        update_context: around backward and the optimizer step (LMModule: autocast off, as Lightning's automatic
            optimization ran them).
        read_loss: called with the loss before the backward (LMModule's logging step); True stops the step there:
            no backward, no update (a non-finite loss).
    Returns: the loss (not detached), or None where read_loss stopped the step.
    """
    if cuda_graphs:
        torch.compiler.cudagraph_mark_step_begin()
    with forward_context:
        loss = model(x, y, z_loss=z_loss) if z_loss else model(x, y)
    if read_loss is not None and read_loss(loss):
        return None
    with update_context:
        backward(loss)
        step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
    device = loss.device.type
    if torch.is_autocast_enabled(device):
        # torch's cast cache is keyed by tensor with no version check and cleared only when the outermost autocast
        # exits: inside Lightning's (around a whole batch of steps), the next step would run on the low-precision
        # copies cast before this update
        torch.clear_autocast_cache()
    return loss
