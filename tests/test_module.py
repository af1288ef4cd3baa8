"""The LightningModule's pieces: the schedule, the optimizer's decay groups and settings, bits per byte."""

import itertools
import math

import pytest
import torch

from ffnbench.config import OptimConfig
from ffnbench.ffn import FFNSpec
from ffnbench.model import ModelConfig
from ffnbench.module import LMModule, lr_factor
from ffnbench.tokenizer import bits_per_byte


def test_warmup_then_cosine_to_the_floor_at_the_last_step():
    # A run of 110 steps takes optimizer steps 0 … 109: warmup peaks at step 9, the floor is reached at step 109.
    factors = [lr_factor(s, warmup_steps=10, total_steps=110, min_ratio=0.1) for s in range(111)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == 1.0  # the warmup's end
    assert all(a < b for a, b in itertools.pairwise(factors[:10]))  # rising during warmup
    assert all(a > b for a, b in itertools.pairwise(factors[9:110]))  # then falling, every step
    assert factors[59] == pytest.approx(0.1 + 0.9 * 0.5)  # halfway down the cosine (50 of 100 steps)
    assert factors[109] == 0.1 and factors[110] == 0.1  # the last step runs at the floor, exactly


@pytest.mark.parametrize(("warmup", "total"), [(0, 1), (0, 2), (0, 400), (1, 2), (40, 400), (50, 51)])
def test_the_schedule_ends_at_the_floor_whatever_its_length(warmup, total):
    factors = [lr_factor(s, warmup, total, 0.145) for s in range(total)]
    assert max(factors) == 1.0 and factors[max(warmup - 1, 0)] == 1.0
    if total > 1:
        assert factors[-1] == 0.145


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
