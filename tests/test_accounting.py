"""Analytic parameter and FLOP accounting against the built model and torch's FlopCounterMode."""

import pytest

from ffnbench.accounting import (
    attention_params,
    count_flops,
    count_params,
    ffn_forward_flops,
    measure_training_flops,
    solve_d_model,
)
from ffnbench.ffn import VARIANTS, FFNSpec
from ffnbench.model import GPT, ModelConfig


def cfg_for(ffn: FFNSpec, **kw) -> ModelConfig:
    base = {"vocab_size": 97, "seq_len": 24, "d_model": 48, "n_layer": 3, "n_head": 4, "ffn": ffn}
    return ModelConfig(**{**base, **kw})


@pytest.mark.parametrize("act", sorted(VARIANTS))
@pytest.mark.parametrize("attn_bias", [False, True])
def test_param_breakdown_equals_the_built_model(act, attn_bias):
    cfg = cfg_for(FFNSpec(act, budget=4, bias=True), attn_bias=attn_bias)
    model = GPT(cfg)
    p = count_params(cfg)
    assert p.total == sum(x.numel() for x in model.parameters())
    assert p.ffn_per_layer == sum(x.numel() for x in model.blocks[0].ffn.parameters())
    assert p.attention_per_layer == sum(x.numel() for x in model.blocks[0].attn.parameters())
    assert p.block == sum(x.numel() for x in model.blocks[0].parameters())
    assert p.non_embedding == p.total - model.wte.weight.numel() - model.wpe.weight.numel()


def test_bert_base_block():
    assert attention_params(768, bias=True) == 2_362_368
    p = count_params(ModelConfig(d_model=768, n_head=12, ffn=FFNSpec("gelu", width=4, bias=True)))
    assert p.ffn_per_layer == 4_722_432
    assert p.ffn_share == pytest.approx(4_722_432 / (4_722_432 + 2_362_368))  # ≈ 2/3
    assert 0.66 < p.ffn_share < 0.67


def test_ffn_flops_formula():
    assert ffn_forward_flops(512, 768, 3072, gated=False) == 4 * 512 * 768 * 3072 == 4_831_838_208
    assert ffn_forward_flops(10, 8, 16, gated=True) == 2 * 10 * 3 * 8 * 16


# FlopCounterMode counts every matmul of the forward and backward; the analytic count ignores only O(d)
# work (biases, norms) that torch does not count either, so the two agree to rounding: tolerance 0.1%.
@pytest.mark.parametrize("act", ["relu", "swiglu", "linear", "geglu"])
@pytest.mark.parametrize("seq_len", [8, 24])
def test_analytic_flops_agree_with_flop_counter(act, seq_len):
    cfg = cfg_for(FFNSpec(act, budget=4, bias=True))
    measured = measure_training_flops(GPT(cfg), batch_size=2, seq_len=seq_len)
    analytic = count_flops(cfg, seq_len=seq_len).training
    assert measured == pytest.approx(analytic, rel=1e-3)


def test_flop_breakdown_adds_up():
    cfg = cfg_for(FFNSpec("swiglu", budget=4))
    f = count_flops(cfg)
    assert f.forward == cfg.n_layer * (f.ffn_forward_per_layer + f.attention_forward_per_layer) + f.head_forward
    assert f.training == 3 * f.forward


@pytest.mark.parametrize("ratio", [1, 2, 4, 8])
def test_solve_d_model_hits_a_fixed_budget(ratio):
    target = 2_000_000
    ffn = FFNSpec("gelu", width=ratio)
    d, mismatch = solve_d_model(target, n_layer=4, n_head=4, ffn=ffn)
    assert d % 4 == 0
    actual = count_params(ModelConfig(d_model=d, n_layer=4, n_head=4, ffn=ffn)).non_embedding
    assert mismatch == pytest.approx((actual - target) / target)
    assert abs(mismatch) < 0.05
    # wider FFNs leave a narrower model
    if ratio > 1:
        assert d < solve_d_model(target, 4, 4, FFNSpec("gelu", width=ratio / 2))[0]
