"""Lightning's floor: what Lightning's training loop itself costs a step on this machine, around a one-parameter
model, against the same hand loop: the part of the pipeline's overhead that no change on this side of Lightning's
API removes (the overhead benchmark's `lightning_floor`)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from ffnbench.bench.contenders import quiet
from ffnbench.bench.session import BenchSession
from ffnbench.training.throughput import sync


def lightning_floor(session: BenchSession, steps: int, reps: int = 3) -> dict[str, Any]:
    """What Lightning's training loop itself costs a step here: a one-parameter model trained by a Trainer set up as
    train() sets it up (NoProfiler, no logger, checkpointing, progress bar or extra callback) and by the same hand
    loop (AdamW, its schedule, clipping), `steps` steps each, `reps` times interleaved. The difference is the part
    of the pipeline's overhead that no change on this side of Lightning's API removes.

    Returns ms per step of each (the median over all steps and the 5th percentile, which a busy machine disturbs
    least) and the differences."""
    import lightning as L

    from ffnbench.training.callbacks import NoProfiler

    device = session.device
    x = torch.ones(4, 1, device=device)

    def optimizer_for(net: torch.nn.Module) -> tuple[torch.optim.Optimizer, Any]:
        optimizer = torch.optim.AdamW(net.parameters(), fused=True)
        return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)

    class Trivial(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(1, 1)
            self.params = list(self.net.parameters())

        def __setattr__(self, name: str, value: Any) -> None:  # as cheap as LMModule's
            if name == "_current_fx_name":
                object.__setattr__(self, name, value)
            else:
                super().__setattr__(name, value)

        def training_step(self, batch, batch_idx):
            return self.net(batch).sum()

        def on_before_optimizer_step(self, optimizer) -> None:
            torch.nn.utils.clip_grad_norm_(self.params, 1.0)

        def configure_optimizers(self):
            optimizer, scheduler = optimizer_for(self.net)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    class Clock(L.Callback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            sync(device)
            self.times.append(time.perf_counter())

    def batches():
        while True:
            yield x

    def lightning() -> list[float]:
        clock = Clock()
        trainer = L.Trainer(accelerator="gpu" if session.gpu else "cpu", devices=1, max_steps=steps, max_epochs=-1,
                            logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, callbacks=[clock], profiler=NoProfiler(),
                            num_sanity_val_steps=0)
        with quiet():
            trainer.fit(Trivial(), train_dataloaders=batches())
        return [1e3 * (b - a) for a, b in zip(clock.times[steps // 10:], clock.times[steps // 10 + 1:])]

    def hand() -> list[float]:
        model = torch.nn.Linear(1, 1).to(device)
        params, (optimizer, scheduler) = list(model.parameters()), optimizer_for(model)
        times = []
        for _ in range(steps):
            model(x).sum().backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            sync(device)
            times.append(time.perf_counter())
        return [1e3 * (b - a) for a, b in zip(times[steps // 10:], times[steps // 10 + 1:])]

    ms: dict[str, list[float]] = {"hand": [], "lightning": []}
    for rep in range(reps):  # interleaved, the order reversed every other round (timing.interleaved)
        for name in ("hand", "lightning") if rep % 2 == 0 else ("lightning", "hand"):
            ms[name] += hand() if name == "hand" else lightning()
    figures = {name: {"median": float(np.median(v)), "p5": float(np.percentile(v, 5)), "n": len(v)}
               for name, v in ms.items()}
    return {**figures, "steps": steps, "reps": reps,
            "extra_ms_per_step": {k: figures["lightning"][k] - figures["hand"][k] for k in ("median", "p5")}}
