"""Analytic parameter and FLOP accounting against the built model and torch's FlopCounterMode."""

import pytest
import torch

from ffnbench.model.accounting import (
    attention_params,
    count_flops,
    count_params,
    ffn_forward_flops,
    measure_training_flops,
    qk_norm_params,
    solve_d_model,
)
from ffnbench.model.ffn import VARIANTS, FFNSpec
from ffnbench.model.model import GPT, ModelConfig


def cfg_for(ffn: FFNSpec, **kw) -> ModelConfig:
    base = {"vocab_size": 97, "seq_len": 24, "d_model": 48, "n_layer": 3, "n_head": 4, "ffn": ffn}
    return ModelConfig(**{**base, **kw})


@pytest.mark.parametrize("act", sorted(VARIANTS))
@pytest.mark.parametrize("attn_bias", [False, True])
@pytest.mark.parametrize("qk_norm", [False, True])
def test_param_breakdown_equals_the_built_model(act, attn_bias, qk_norm):
    cfg = cfg_for(FFNSpec(act, budget=4, bias=True), attn_bias=attn_bias, qk_norm=qk_norm)
    model = GPT(cfg)
    p = count_params(cfg)
    block = model.blocks[0]
    norms = [m for m in block.modules() if isinstance(m, torch.nn.LayerNorm)]
    assert len(norms) == (4 if qk_norm else 2)
    assert p.total == sum(x.numel() for x in model.parameters())
    assert p.ffn_per_layer == sum(x.numel() for x in block.ffn.parameters())
    # attention: its projections; the norms of a block (qk_norm's, inside the attention module, too): norms_per_layer
    assert p.attention_per_layer == sum(x.numel() for x in block.attn.qkv.parameters()) + \
        sum(x.numel() for x in block.attn.proj.parameters())
    assert p.norms_per_layer == sum(x.numel() for m in norms for x in m.parameters())
    assert p.block == sum(x.numel() for x in block.parameters())
    assert p.non_embedding == p.total - model.wte.weight.numel() - model.wpe.weight.numel()


def test_qk_norm_adds_two_head_sized_norms_per_layer_to_the_non_embedding_count():
    ffn = FFNSpec("swiglu", budget=4)
    off, on = count_params(cfg_for(ffn)), count_params(cfg_for(ffn, qk_norm=True))
    assert on.non_embedding - off.non_embedding == 3 * 2 * 2 * 12  # 3 layers, q and k, gain and bias, head_dim 12
    assert on.attention_per_layer == off.attention_per_layer and on.ffn_per_layer == off.ffn_per_layer
    assert on.embedding == off.embedding and on.ffn_share == off.ffn_share
    assert qk_norm_params(48, 4, bias=False, qk_norm=True) == 24 and qk_norm_params(48, 4, True, False) == 0


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
    cfg = cfg_for(FFNSpec(act, budget=4, bias=True), qk_norm=act == "swiglu")  # qk_norm's norms: O(d), uncounted
    measured = measure_training_flops(GPT(cfg), batch_size=2, seq_len=seq_len)
    analytic = count_flops(cfg, seq_len=seq_len).training
    assert measured == pytest.approx(analytic, rel=1e-3)


def test_causal_attention_counts_the_keys_each_query_sees():
    """MFU's convention: query t (0-based) is multiplied with t + 1 keys, (T + 1)/2 on average over a window; the
    records' default counts all T. Only the context term differs: by 4·d·(T − 1)/2 per token and layer, forward."""
    cfg = cfg_for(FFNSpec("gelu", budget=4))
    t, d = cfg.seq_len, cfg.d_model
    full, causal = count_flops(cfg), count_flops(cfg, causal=True)
    assert full.attention_forward_per_layer - causal.attention_forward_per_layer == round(4 * d * t) - round(
        4 * d * (t + 1) / 2)
    assert full.ffn_forward_per_layer == causal.ffn_forward_per_layer and full.head_forward == causal.head_forward
    assert sum(range(1, t + 1)) / t == (t + 1) / 2  # the average over the window's positions


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


def test_solve_d_model_counts_qk_norm_and_searches_past_heads_too_narrow_for_it():
    ffn = FFNSpec("gelu", width=4)
    target = count_params(ModelConfig(d_model=64, n_layer=4, n_head=8, ffn=ffn, qk_norm=True)).non_embedding
    assert solve_d_model(target, n_layer=4, n_head=8, ffn=ffn, qk_norm=True) == (64, 0.0)
    d, mismatch = solve_d_model(target, n_layer=4, n_head=8, ffn=ffn)  # without: the same d, a little short
    assert d == 64 and mismatch == pytest.approx(-4 * 2 * 2 * 8 / target)
