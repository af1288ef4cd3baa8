"""The LightningModule's pieces: the schedule, the optimizer's decay groups and settings, bits per byte."""

import math

import pytest
import torch

from ffnbench.config.schema import OptimConfig
from ffnbench.data.tokenizer import bits_per_byte
from ffnbench.model.ffn import FFNSpec
from ffnbench.model.model import ModelConfig
from ffnbench.training.module import LMModule
from ffnbench.training.readout import DEFER_ENV


def test_the_optimizer_steps_at_the_schedule_from_warmup_to_the_floor():
    cfg = ModelConfig(vocab_size=32, seq_len=8, d_model=16, n_layer=1, n_head=2)
    module = LMModule(cfg, OptimConfig(lr=1e-2, warmup_steps=3, min_lr_ratio=0.1), seed=0, total_steps=12,
                      tokens_per_step=8)
    configured = module.configure_optimizers()
    optimizer, scheduler = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    lrs = []
    for _ in range(12):  # the lr each optimizer step runs at, as Lightning steps the scheduler after it
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[2] == pytest.approx(1e-2) and lrs[-1] == pytest.approx(1e-3)


def test_no_weight_decay_on_norms_biases_and_embeddings():
    ffn = FFNSpec("swiglu", budget=4, bias=True)
    cfg = ModelConfig(vocab_size=32, seq_len=8, d_model=16, n_layer=2, n_head=2, ffn=ffn)
    optim = OptimConfig(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, warmup_steps=2, min_lr_ratio=0.1,
                        grad_clip=1.0)
    module = LMModule(cfg, optim, seed=0, total_steps=10, tokens_per_step=8)
    assert module.status == "running" and module.divergence is None
    decay, no_decay = module.configure_optimizers()["optimizer"].param_groups
    names = {id(p): n for n, p in module.model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(n.endswith("weight") and "ln" not in n and not n.startswith(("wte", "wpe")) for n in decayed)
    assert "blocks.0.ffn.w_gate.weight" in decayed and "blocks.0.attn.qkv.weight" in decayed
    assert len(decayed) + len(no_decay["params"]) == len(names)


def test_the_optimizer_gets_the_settings_and_the_schedule_starts_the_warmup():
    cfg = ModelConfig(vocab_size=32, seq_len=8, d_model=16, n_layer=1, n_head=2)
    optim = {"lr": 2e-3, "betas": [0.8, 0.9], "eps": 1e-6, "weight_decay": 0.05, "warmup_steps": 4,
             "min_lr_ratio": 0.2, "grad_clip": None}  # a mapping is checked into an OptimConfig
    module = LMModule(cfg, optim, seed=0, total_steps=10, tokens_per_step=8)
    assert module.optim == OptimConfig(lr=2e-3, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.05, warmup_steps=4,
                                       min_lr_ratio=0.2, grad_clip=None)
    configured = module.configure_optimizers()
    group = configured["optimizer"].param_groups[0]
    assert (group["betas"], group["eps"], group["weight_decay"]) == ((0.8, 0.9), 1e-6, 0.05)
    assert group["lr"] == pytest.approx(2e-3 * 1 / 4)  # LambdaLR applies step 0's factor at once
    assert group["initial_lr"] == 2e-3


def test_bits_per_byte():
    assert bits_per_byte(math.log(2), 1.0) == pytest.approx(1.0)
    assert bits_per_byte(2.0, 4.0) == pytest.approx(2.0 / (math.log(2) * 4.0))
    assert bits_per_byte(2.0, 1.0) == pytest.approx(2.0 / math.log(2))  # byte level: BPB = loss / ln 2
    assert bits_per_byte(torch.tensor(3.0), 3.0).item() == pytest.approx(1 / math.log(2))  # tensors too


def one_optimizer_step(precision, grad_clip):
    """One training step of a small model on one fixed batch: the module's logged gradient norm (before clipping)
    and the AdamW first moment after the step (the clipped gradient × (1 − β1)), by parameter name."""
    import lightning as L

    cfg = ModelConfig(vocab_size=64, seq_len=16, d_model=32, n_layer=2, n_head=2)
    module = LMModule(cfg, OptimConfig(lr=1e-3, warmup_steps=0, grad_clip=grad_clip), seed=0, total_steps=1,
                      tokens_per_step=4 * 16)
    x = torch.randint(0, 64, (4, 17), generator=torch.Generator().manual_seed(0))
    # one batch of one step (a stack of one, as data.TrainBatches makes it)
    batches = torch.utils.data.DataLoader([(x[None, :, :-1], x[None, :, 1:])], batch_size=None)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        **precision)
    logged: dict = {}
    log_step = module.log_step
    module.log_step = lambda metrics: (logged.update(metrics), log_step(metrics))  # what the loggers get
    trainer.fit(module, train_dataloaders=batches)
    optimizer = trainer.optimizers[0]
    names = {id(p): n for n, p in module.model.named_parameters()}
    moments = {names[id(p)]: optimizer.state[p]["exp_avg"] for group in optimizer.param_groups
               for p in group["params"]}
    return float(logged["train/grad_norm"]), moments


def test_fp16_with_a_loss_scaler_clips_the_true_gradient():
    # 16-mixed scales the loss (here by 2^16) and the fused AdamW unscales inside its step, after the module has
    # clipped: clipping must see the gradient divided by the scale, as an fp32 step does, or it clips gradients
    # 65536 times too large and the step divides them again (training barely moves).
    from lightning.pytorch.plugins.precision import MixedPrecision

    fp32_norm, fp32 = one_optimizer_step({"precision": "32-true"}, grad_clip=None)
    clip = fp32_norm / 4  # clipping acts: the clipped gradient is a quarter of the true one
    _, fp32_clipped = one_optimizer_step({"precision": "32-true"}, grad_clip=clip)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    fp16_norm, fp16 = one_optimizer_step({"plugins": [MixedPrecision("16-mixed", "cpu", scaler=scaler)]},
                                         grad_clip=clip)
    assert scaler.get_scale() == 2.0**16  # no inf/NaN: the step was taken
    assert fp16_norm == pytest.approx(fp32_norm, rel=0.02)  # the norm of the true gradient, not × 2^16
    for name, moment in fp32_clipped.items():  # the step used the clipped true gradient
        assert torch.linalg.vector_norm(fp16[name] - moment) <= 0.05 * torch.linalg.vector_norm(moment), name
    total = lambda m: float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(v) for v in m.values()])))
    assert total(fp32_clipped) == pytest.approx(total(fp32) / 4, rel=1e-4)


# ---- the training step's cost: metrics on logging steps only, written once per step, no host sync between ------

STEP_RUN = ["model=micro", "logger=csv", "data.batch_size=8", "data.val_tokens=512", "data.final_val_tokens=512",
            "trainer.max_steps=11", "trainer.val_every=100", "trainer.ckpt_every=100", "trainer.accelerator=cpu"]


def _step_run(tmp_path, name, *extra, callbacks=()):
    from ffnbench.config.compose import compose
    from ffnbench.train import train

    cfg = compose([*STEP_RUN, f"data.cache_dir={tmp_path / 'cache'}", f"run_dir={tmp_path / name}", *extra])
    return train(cfg, callbacks=list(callbacks)), tmp_path / name


def _train_rows(run_dir) -> dict[int, dict[str, str]]:
    """metrics.csv's training rows (those with a training loss) by step, with their non-empty cells."""
    import csv

    with (run_dir / "metrics.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["train/loss"]]
    steps = [int(r["step"]) for r in rows]
    assert len(steps) == len(set(steps)), f"a step was written in more than one row: {steps}"
    return {int(r["step"]): {k: v for k, v in r.items() if v} for r in rows}


class HostReads:
    """Counts the Python calls that read a tensor's value on the host (`.item()`, `.tolist()`, `float()`), by the
    training step during which they happen (from a step's forward to the next step's or the validation's start).
    On a GPU each is a sync that stalls the queue; the test runs on the CPU, where the calls are what can be seen."""

    def __init__(self, monkeypatch):
        import lightning as L

        self.step: int | None = None
        self.by_step: dict[int, int] = {}
        for name in ("item", "tolist", "__float__"):
            original = getattr(torch.Tensor, name)

            def counted(tensor, *args, _original=original, **kwargs):
                if self.step is not None:
                    self.by_step[self.step] = self.by_step.get(self.step, 0) + 1
                return _original(tensor, *args, **kwargs)

            monkeypatch.setattr(torch.Tensor, name, counted)
        reads = self

        class Marks(L.Callback):
            """Marks each training step as its forward starts (a batch holds several: trainer.inner_steps)."""

            def on_train_start(self, trainer, pl_module):
                def mark(module, args):
                    if trainer.training:
                        reads.step = trainer.global_step

                self.handle = pl_module.model.register_forward_pre_hook(mark)

            def on_validation_start(self, trainer, *args):
                reads.step = None

            def on_train_end(self, trainer, *args):
                reads.step = None
                self.handle.remove()

        self.callback = Marks()


def test_training_metrics_are_one_row_every_log_every_steps_and_the_last(tmp_path):
    result, run_dir = _step_run(tmp_path, "every4", "trainer.log_every=4")
    rows = _train_rows(run_dir)
    assert sorted(rows) == [3, 7, 10]  # steps 3 and 7 (every 4th, counted from 1), and the last, 10
    for step, row in rows.items():
        assert {"train/loss", "tokens", "lr", "train/grad_norm"} <= set(row), row
        assert float(row["tokens"]) == (step + 1) * 8 * 32
    assert "perf/tokens_per_s" in rows[7]  # the throughput of the window, in the same row
    assert float(rows[10]["train/loss"]) == result.metrics["final_train_loss"]


def test_no_host_read_on_a_step_that_does_not_log(tmp_path, monkeypatch):
    reads = HostReads(monkeypatch)
    _step_run(tmp_path, "reads", "trainer.log_every=4", "trainer.progress_bar=true", callbacks=[reads.callback])
    assert set(reads.by_step) <= {3, 7, 10}, reads.by_step
    assert reads.by_step.get(3), "the logging step reads its loss"


def test_deferred_reads_write_the_same_rows_and_read_nothing_during_training(tmp_path, monkeypatch):
    # The GPU path (training.readout) forced on the CPU: each logging step's row is copied without a host read and
    # written at the next batch's start. The rows, curve and training losses are the ones read at once, bit for bit.
    now, _ = _step_run(tmp_path, "now", "trainer.log_every=4")
    monkeypatch.setenv(DEFER_ENV, "1")
    reads = HostReads(monkeypatch)
    later, run_dir = _step_run(tmp_path, "later", "trainer.log_every=4", callbacks=[reads.callback])
    assert reads.by_step == {}, f"host reads during training steps: {reads.by_step}"
    timeless = lambda rows: {step: {k: v for k, v in row.items() if not k.startswith("perf/")}
                             for step, row in rows.items()}
    assert timeless(_train_rows(run_dir)) == timeless(_train_rows(tmp_path / "now"))
    assert "perf/tokens_per_s" in _train_rows(run_dir)[7]
    assert later.train_curve == now.train_curve and len(later.train_curve) == 3
    assert later.curve == now.curve and later.metrics == now.metrics


def test_a_deferred_row_is_read_only_once_the_next_batch_s_steps_are_queued_behind_it(tmp_path, monkeypatch):
    # On a GPU the read of a row waits for the device to reach the row's copy: with no work queued after it, that is a
    # drain. The probe counts the optimizer steps the host issued between a row's copy and its read (what the device
    # has queued behind it then), assuming nothing about how far the device got. Only the run's last row, read at
    # fit's end, has nothing after it.
    import lightning as L

    from ffnbench.training import module as module_py

    taken = [0]
    queued: dict[int, int] = {}  # a row's step -> optimizer steps issued between its copy and its read

    class Probe(module_py.Readout):
        def __init__(self, values):
            super().__init__(values)
            self.step, self.taken = int(values["tokens"]) // (8 * 32) - 1, taken[0]

        def read(self):
            queued[self.step] = taken[0] - self.taken
            return super().read()

    class CountSteps(L.Callback):
        def on_train_start(self, trainer, module):
            trainer.optimizers[0].register_step_post_hook(lambda *args: taken.__setitem__(0, taken[0] + 1))

    monkeypatch.setattr(module_py, "Readout", Probe)
    monkeypatch.setenv(DEFER_ENV, "1")
    inner = 2
    result, _ = _step_run(tmp_path, "probe", "trainer.log_every=2", f"trainer.inner_steps={inner}",
                          callbacks=[CountSteps()])
    *rows, last = sorted(queued)
    assert rows and last == result.steps - 1 and queued[last] == 0
    # each row is read at the end of the next batch: all of that batch's steps are queued behind it
    assert {step: queued[step] for step in rows} == {step: min(inner, result.steps - 1 - step) for step in rows}
    assert min(queued[step] for step in rows) >= 1


def test_deferred_reads_stop_a_run_whose_loss_is_not_finite(tmp_path, monkeypatch):
    import lightning as L

    class InfAt3(L.Callback):  # the training loss of logging step 3 is +inf (its gradient is not: a constant)
        def on_train_start(self, trainer, module):
            forward = module.model.forward
            module.model.forward = lambda x, y=None, **kw: forward(x, y, **kw) + (
                float("inf") if module.training and y is not None and trainer.global_step == 3 else 0.0)

    monkeypatch.setenv(DEFER_ENV, "1")
    result, _ = _step_run(tmp_path, "inf", "trainer.log_every=4", "trainer.inner_steps=4", callbacks=[InfAt3()])
    # step 3's row is read once the next batch's steps (4-7) are queued: they are taken, no step after them
    assert result.status == "diverged" and result.steps == 8
    assert result.error == "training loss became inf at step 3"
    assert [step for step, _ in result.train_curve] == [3, 7]  # the row of the batch after it is written too
    assert result.train_curve[0][1] == float("inf") and math.isfinite(result.train_curve[1][1])


def test_logging_every_step_or_every_n_steps_trains_the_same_model(tmp_path):
    every, sparse = (_step_run(tmp_path, f"log{n}", f"trainer.log_every={n}") for n in (1, 5))
    rows_every, rows_sparse = _train_rows(every[1]), _train_rows(sparse[1])
    assert sorted(rows_every) == list(range(11)) and sorted(rows_sparse) == [4, 9, 10]
    for step in rows_sparse:  # the same losses, bit for bit, whatever the logging cadence
        assert rows_sparse[step]["train/loss"] == rows_every[step]["train/loss"]
        assert rows_sparse[step]["train/grad_norm"] == rows_every[step]["train/grad_norm"]
    assert every[0].curve == sparse[0].curve and every[0].val_windows == sparse[0].val_windows


def test_under_mixed_precision_only_the_forward_runs_in_autocast():
    # Lightning runs training_step under the precision's autocast; its automatic optimization ran backward and the
    # optimizer step outside it, and so must the loop of several steps in training_step (else the eager parts of
    # backward would run at another precision on a GPU).
    import lightning as L

    cfg = ModelConfig(vocab_size=64, seq_len=16, d_model=32, n_layer=1, n_head=2)
    module = LMModule(cfg, OptimConfig(lr=1e-3, warmup_steps=0), seed=0, total_steps=2, tokens_per_step=4 * 16)
    seen: dict[str, list[bool]] = {"forward": [], "backward": [], "optimizer step": []}
    module.model.register_forward_pre_hook(lambda m, args: seen["forward"].append(torch.is_autocast_enabled("cpu")))

    class Watch(L.Callback):
        def on_before_backward(self, trainer, pl_module, loss):
            seen["backward"].append(torch.is_autocast_enabled("cpu"))

        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            seen["optimizer step"].append(torch.is_autocast_enabled("cpu"))

    x = torch.randint(0, 64, (2, 4, 17), generator=torch.Generator().manual_seed(0))
    batches = torch.utils.data.DataLoader([(x[:, :, :-1], x[:, :, 1:])], batch_size=None)  # one batch of 2 steps
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        precision="bf16-mixed", callbacks=[Watch()])
    trainer.fit(module, train_dataloaders=batches)
    assert seen == {"forward": [True, True], "backward": [False, False], "optimizer step": [False, False]}
    assert trainer.global_step == 2


def _bf16_losses(steps_per_batch: int, monkeypatch, clear: bool = True) -> list[float]:
    """The training loss at each of 6 steps under bf16-mixed, the precision plugin's autocast caching its weight casts
    as Lightning < 2.5.5's did, with `steps_per_batch` optimizer steps in each Lightning batch."""
    import lightning as L
    from lightning.pytorch.plugins.precision import MixedPrecision

    monkeypatch.setattr(MixedPrecision, "autocast_context_manager",
                        lambda self: torch.autocast(self.device, dtype=torch.bfloat16, cache_enabled=True))
    if not clear:  # the negative control: the fix taken out
        monkeypatch.setattr(torch, "clear_autocast_cache", lambda: None)
    cfg = ModelConfig(vocab_size=64, seq_len=16, d_model=32, n_layer=1, n_head=2)
    module = LMModule(cfg, OptimConfig(lr=3e-2, warmup_steps=0), seed=0, total_steps=6, tokens_per_step=4 * 16)
    losses: list[float] = []
    module.model.register_forward_hook(lambda m, args, out: losses.append(out.detach().float().item()))
    x = torch.randint(0, 64, (6, 4, 17), generator=torch.Generator().manual_seed(0))
    k = steps_per_batch
    batches = [(x[i:i + k, :, :-1], x[i:i + k, :, 1:]) for i in range(0, 6, k)]
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=6, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0,
                        precision="bf16-mixed")
    trainer.fit(module, train_dataloaders=torch.utils.data.DataLoader(batches, batch_size=None))
    return losses


def test_steps_inside_one_batch_see_the_updated_weights_under_a_caching_autocast(monkeypatch):
    """A batch of several optimizer steps runs inside one autocast: its cast cache must not hand steps 2..K the bf16
    copies of the weights cast at step 1. The same 6 steps, 1 or 3 to a batch, give the same losses step by step;
    without clearing the cache after each step (the control) they do not."""
    one = _bf16_losses(1, monkeypatch)
    assert len(one) == 6
    assert _bf16_losses(3, monkeypatch) == one
    assert _bf16_losses(3, monkeypatch, clear=False) != one


@pytest.mark.parametrize("z_loss", [0.0, 1e-2])
def test_the_training_loss_adds_z_loss_only_when_asked_and_validation_stays_cross_entropy(z_loss):
    import lightning as L

    from ffnbench.model.model import GPT

    cfg = ModelConfig(vocab_size=64, seq_len=16, d_model=32, n_layer=1, n_head=2)
    module = LMModule(cfg, OptimConfig(lr=1e-3, warmup_steps=0, z_loss=z_loss), seed=0, total_steps=2,
                      tokens_per_step=4 * 16)
    calls: list[tuple[int, dict]] = []
    module.model.register_forward_pre_hook(lambda m, args, kwargs: calls.append((len(args), kwargs)), with_kwargs=True)
    losses: list[torch.Tensor] = []

    class Watch(L.Callback):
        def on_before_backward(self, trainer, pl_module, loss):
            losses.append(loss.detach().clone())

    x = torch.randint(0, 64, (2, 4, 17), generator=torch.Generator().manual_seed(0))
    batches = torch.utils.data.DataLoader([(x[:, :, :-1], x[:, :, 1:])], batch_size=None)  # one batch of 2 steps
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=2, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0, callbacks=[Watch()])
    trainer.fit(module, train_dataloaders=batches)
    # the call of today's runs, model(x, y), unless z_loss is on
    assert calls == [(2, {"z_loss": z_loss} if z_loss else {})] * 2
    fresh = GPT(cfg, seed=0)  # the first step's loss, from the same init
    with torch.no_grad():
        ce = fresh(x[0, :, :-1], x[0, :, 1:])
        assert torch.equal(losses[0], fresh(x[0, :, :-1], x[0, :, 1:], z_loss=z_loss) if z_loss else ce)
    assert (losses[0] > ce + 1e-3) if z_loss else torch.equal(losses[0], ce)
    calls.clear()
    module.on_validation_epoch_start()
    with torch.no_grad():
        module.validation_step((x[0, :, :-1], x[0, :, 1:]), 0)
    # validation: the plain cross-entropy, each token's (the one evaluation path of both validation sets)
    assert calls == [(2, {"reduction": "none"})]
