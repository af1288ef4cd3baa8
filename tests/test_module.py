"""The LightningModule's pieces: the schedule, the optimizer's decay groups, bits per byte."""

import itertools
import math

import pytest

from ffnbench.data import bits_per_byte
from ffnbench.ffn import FFNSpec
from ffnbench.model import ModelConfig
from ffnbench.module import LMModule, lr_factor


def test_warmup_then_cosine_to_the_floor():
    factors = [lr_factor(s, warmup_steps=10, total_steps=110, min_ratio=0.1) for s in range(111)]
    assert factors[0] == pytest.approx(0.1) and factors[9] == pytest.approx(1.0)
    assert all(a <= b for a, b in itertools.pairwise(factors[:10]))  # rising during warmup
    assert all(a >= b for a, b in itertools.pairwise(factors[10:]))  # then falling
    assert factors[60] == pytest.approx(0.1 + 0.9 * 0.5)  # halfway down the cosine
    assert factors[110] == pytest.approx(0.1)


def test_no_weight_decay_on_norms_biases_and_embeddings():
    ffn = FFNSpec("swiglu", budget=4, bias=True)
    cfg = ModelConfig(vocab_size=32, seq_len=8, d_model=16, n_layer=2, n_head=2, ffn=ffn)
    optim = {"lr": 1e-3, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1, "warmup_steps": 2,
             "min_lr_ratio": 0.1, "grad_clip": 1.0}
    module = LMModule(cfg, optim, seed=0, total_steps=10, tokens_per_step=8)
    decay, no_decay = module.configure_optimizers()["optimizer"].param_groups
    names = {id(p): n for n, p in module.model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(n.endswith("weight") and "ln" not in n and not n.startswith(("wte", "wpe")) for n in decayed)
    assert "blocks.0.ffn.w_gate.weight" in decayed and "blocks.0.attn.qkv.weight" in decayed
    assert len(decayed) + len(no_decay["params"]) == len(names)


def test_bits_per_byte():
    assert bits_per_byte(math.log(2), 1.0) == pytest.approx(1.0)
    assert bits_per_byte(2.0, 4.0) == pytest.approx(2.0 / (math.log(2) * 4.0))
