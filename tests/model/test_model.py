"""The model: only the FFN varies, init is identical outside the FFN, shapes, and bad input."""

import pytest
import torch

from ffnbench.errors import ConfigError
from ffnbench.model.ffn import VARIANTS, FFNSpec
from ffnbench.model.model import GPT, ModelConfig, is_ffn_param


def small(ffn: FFNSpec, **kw) -> ModelConfig:
    return ModelConfig(**{"vocab_size": 64, "seq_len": 16, "d_model": 32, "n_layer": 2, "n_head": 4, "ffn": ffn, **kw})


def test_forward_shapes_and_loss():
    model = GPT(small(FFNSpec("swiglu", budget=4)))
    idx = torch.randint(0, 64, (3, 16))
    assert model(idx).shape == (3, 16, 64)
    loss = model(idx, idx)
    assert loss.ndim == 0 and torch.isfinite(loss)
    # At init the logits are near zero, so the loss is near ln(vocab).
    assert abs(loss.item() - torch.log(torch.tensor(64.0)).item()) < 0.5


def test_only_the_ffn_differs_between_variants():
    a = GPT(small(FFNSpec("relu", width=4, bias=True)), seed=7)
    b = GPT(small(FFNSpec("swiglu", budget=4)), seed=7)
    non_ffn_a = {n: p for n, p in a.named_parameters() if not is_ffn_param(n)}
    non_ffn_b = {n: p for n, p in b.named_parameters() if not is_ffn_param(n)}
    assert list(non_ffn_a) == list(non_ffn_b)
    for name, p in non_ffn_a.items():
        assert p.shape == non_ffn_b[name].shape, name
        assert torch.equal(p, non_ffn_b[name]), f"{name} initialised differently"
    # ... and the FFNs do differ, in names too (gated has w_gate).
    assert any("w_gate" in n for n, _ in b.named_parameters())
    assert not any("w_gate" in n for n, _ in a.named_parameters())


def test_same_seed_same_model_different_seed_different():
    cfg = small(FFNSpec("gelu", width=4))
    a, b, c = GPT(cfg, seed=1), GPT(cfg, seed=1), GPT(cfg, seed=2)
    for (name, pa), pb, pc in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(pa, pb)
        if pa.ndim == 2:
            assert not torch.equal(pa, pc), name


def test_output_head_is_tied_to_the_embedding():
    model = GPT(small(FFNSpec("gelu", width=4)))
    names = [n for n, _ in model.named_parameters()]
    assert "wte.weight" in names and not any("head" in n for n in names)


def test_attention_is_causal():
    model = GPT(small(FFNSpec("gelu", width=4))).eval()
    idx = torch.randint(0, 64, (1, 16))
    changed = idx.clone()
    changed[0, 10:] = (changed[0, 10:] + 1) % 64
    torch.testing.assert_close(model(idx)[0, :10], model(changed)[0, :10])


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"n_head": 5}, "model.n_head"), ({"d_model": 0}, "model.d_model"), ({"seq_len": -1}, "model.seq_len"),
     ({"dropout": 1.5}, "model.dropout"), ({"ffn_init": "xavier"}, "model.ffn_init")],
)
def test_bad_model_configs(kwargs, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        small(FFNSpec("gelu", width=4), **kwargs)


def test_sequence_longer_than_context_is_refused():
    model = GPT(small(FFNSpec("gelu", width=4)))
    with pytest.raises(ConfigError, match="seq_len"):
        model(torch.zeros(1, 17, dtype=torch.long))


def ffn_output_rms_at_init(cfg: ModelConfig, seed: int = 3) -> float:
    """The RMS of every FFN's output over a random batch, through the real model at init (LayerNorm inputs)."""
    model, outputs = GPT(cfg, seed=seed), []
    for ffn in model.ffns:
        ffn.register_forward_hook(lambda module, args, out: outputs.append(out.detach()))
    with torch.no_grad():
        model(torch.randint(0, cfg.vocab_size, (8, cfg.seq_len), generator=torch.Generator().manual_seed(0)))
    return torch.cat([o.flatten() for o in outputs]).square().mean().sqrt().item()


def tiny_like(act: str, ffn_init: str) -> ModelConfig:
    return ModelConfig(vocab_size=256, seq_len=64, d_model=128, n_layer=4, n_head=4,
                       ffn=FFNSpec(act, budget=4), ffn_init=ffn_init)


def test_matched_init_equalises_ffn_output_scale_and_gpt2_does_not():
    gpt2 = {act: ffn_output_rms_at_init(tiny_like(act, "gpt2")) for act in VARIANTS}
    matched = {act: ffn_output_rms_at_init(tiny_like(act, "matched")) for act in VARIANTS}
    # GPT-2 init: the issue's ~10× spread (linear largest, swiglu/geglu smallest) ...
    assert max(gpt2.values()) / min(gpt2.values()) > 5
    assert gpt2["linear"] > gpt2["relu"] > gpt2["gelu"] > gpt2["relu2"] > gpt2["swiglu"]
    # ... matched: every variant within 10% of the GPT-2 GELU FFN's output scale.
    for act, rms in matched.items():
        assert rms == pytest.approx(gpt2["gelu"], rel=0.10), act


def test_matched_init_changes_only_the_ffn_output_projection():
    a, b = GPT(small(FFNSpec("relu", budget=4), ffn_init="matched"), seed=5), \
        GPT(small(FFNSpec("swiglu", budget=4), ffn_init="matched"), seed=5)
    gpt2_b = GPT(small(FFNSpec("swiglu", budget=4)), seed=5)
    params_a, params_b, params_gpt2 = dict(a.named_parameters()), dict(b.named_parameters()), \
        dict(gpt2_b.named_parameters())
    for name, p in params_a.items():
        if not is_ffn_param(name):
            assert torch.equal(p, params_b[name]), f"{name} initialised differently across variants"
    for name, p in params_b.items():  # against GPT-2 init: only w_down moves, by one common factor
        if name.endswith("ffn.w_down.weight"):
            assert not torch.equal(p, params_gpt2[name])
            torch.testing.assert_close(p, params_gpt2[name] * (p.norm() / params_gpt2[name].norm()))
        else:
            assert torch.equal(p, params_gpt2[name]), name
    gelu = small(FFNSpec("gelu", budget=4))  # the reference: matched is GPT-2 init, bit for bit
    for p, q in zip(GPT(gelu, seed=5).parameters(), GPT(small(gelu.ffn, ffn_init="matched"), seed=5).parameters(),
                    strict=True):
        assert torch.equal(p, q)


# ---- model.init -------------------------------------------------------------------------------------------


def test_gpt2_init_is_the_old_formula_bit_for_bit():
    """init=gpt2 (the default) against GPT-2's init written out here: N(0, 0.02) from each parameter's own generator,
    the residual projections over √(2·n_layer), biases 0, gains 1."""
    from ffnbench.model.model import param_seed

    cfg = small(FFNSpec("swiglu", budget=4, bias=True))
    assert cfg.init == "gpt2" and small(cfg.ffn, init="gpt2") == cfg
    model = GPT(cfg, seed=11)
    for name, p in model.state_dict().items():
        if name.endswith(".bias"):
            expected = torch.zeros_like(p)
        elif p.ndim == 1:
            expected = torch.ones_like(p)
        else:
            std = 0.02 / (2 * cfg.n_layer) ** 0.5 if name.endswith(("attn.proj.weight", "ffn.w_down.weight")) else 0.02
            expected = torch.randn(p.shape, generator=torch.Generator().manual_seed(param_seed(11, name))) * std
        assert torch.equal(p, expected), name


def wide(ffn: FFNSpec, **kw) -> ModelConfig:
    return ModelConfig(**{"vocab_size": 512, "seq_len": 256, "d_model": 256, "n_layer": 3, "n_head": 4, "ffn": ffn,
                          **kw})


@pytest.mark.parametrize("act", ["gelu", "swiglu"])
def test_fan_in_init_scales_every_matrix_by_its_input_width(act):
    cfg = wide(FFNSpec(act, width=4, bias=True), init="fan_in")
    model, checked = GPT(cfg, seed=2), 0
    for name, p in model.named_parameters():
        if name.endswith(".bias"):
            assert not p.any(), name
        elif p.ndim == 1:
            assert torch.equal(p, torch.ones_like(p)), name
        else:
            fan_in = 4 * 256 if name.endswith("ffn.w_down.weight") else 256  # d_ff for w_down, else d_model
            std = fan_in**-0.5 * ((2 * 3) ** -0.5 if name.endswith(("attn.proj.weight", "ffn.w_down.weight")) else 1)
            assert p.std().item() == pytest.approx(std, rel=0.03), name
            assert p.mean().abs().item() < 0.1 * std, name
            checked += 1
    assert checked == 2 + 3 * (2 + (3 if act == "swiglu" else 2))  # wte, wpe; per block qkv, proj and the FFN's
    # The tied head's logits start at unit scale: LN(x)·wteᵀ with unit-RMS LN(x) and rows of std 1/√d_model.
    idx = torch.randint(0, 512, (4, 256), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert 0.8 < model(idx).std().item() < 1.25
        assert 0.25 < GPT(wide(cfg.ffn), seed=2)(idx).std().item() < 0.4  # gpt2's: 0.02·√d_model = 0.32 here


def test_fan_in_init_is_identical_outside_the_ffn_across_variants_and_seeded_like_gpt2():
    a = GPT(small(FFNSpec("relu", width=4, bias=True), init="fan_in"), seed=7)
    b = GPT(small(FFNSpec("swiglu", budget=4), init="fan_in"), seed=7)
    gpt2 = GPT(small(FFNSpec("swiglu", budget=4)), seed=7)
    params_b, params_gpt2 = dict(b.named_parameters()), dict(gpt2.named_parameters())
    for name, p in a.named_parameters():
        if not is_ffn_param(name):
            assert torch.equal(p, params_b[name]), f"{name} initialised differently across variants"
    for name, p in params_b.items():  # the same draws as GPT-2's, at another scale
        if p.ndim == 2:
            assert not torch.equal(p, params_gpt2[name])
            torch.testing.assert_close(p, params_gpt2[name] * (p.norm() / params_gpt2[name].norm()))
    c = GPT(small(FFNSpec("swiglu", budget=4), init="fan_in"), seed=8)
    assert not torch.equal(c.wte.weight, b.wte.weight)


@pytest.mark.parametrize("act", ["relu", "swiglu"])
def test_scaled_init_at_gain_1_is_fan_in_bit_for_bit(act):
    fan_in = GPT(wide(FFNSpec(act, budget=4), init="fan_in"), seed=5)
    scaled = dict(GPT(wide(FFNSpec(act, budget=4), init="scaled", init_gain=1.0), seed=5).named_parameters())
    for name, p in fan_in.named_parameters():
        assert torch.equal(p, scaled[name]), name


def test_scaled_init_multiplies_every_matrix_of_fan_in_by_its_gain():
    fan_in = GPT(wide(FFNSpec("gelu", width=4, bias=True), init="fan_in"), seed=3)
    scaled = dict(GPT(wide(FFNSpec("gelu", width=4, bias=True), init="scaled", init_gain=0.55), seed=3)
                  .named_parameters())
    for name, p in fan_in.named_parameters():
        expected = p * 0.55 if p.ndim == 2 else p  # biases 0 and LayerNorm gains 1 either way
        torch.testing.assert_close(scaled[name], expected, rtol=1e-6, atol=0)  # the product rounds apart


@pytest.mark.parametrize("gain", [0.32, 0.55, 1.0])
def test_scaled_init_starts_the_ffn_pre_activations_at_std_gain_whatever_the_width(gain):
    """The FFN's input is a unit-RMS LayerNorm output, so N(0, g²/d_model) input weights give pre-activations of
    std ≈ g at d_model 64 and 256 alike (GPT-2's fixed 0.02 gives 0.02·√d_model: 0.16 and 0.32)."""
    for d_model in (64, 256):
        cfg = ModelConfig(vocab_size=256, seq_len=64, d_model=d_model, n_layer=2, n_head=4,
                          ffn=FFNSpec("gelu", width=4), init="scaled", init_gain=gain)
        model = GPT(cfg, seed=0)
        with torch.no_grad():
            pre = model.blocks[0].ffn.w_up(model.blocks[0].ln_ffn(torch.randn(8, 64, d_model)))
        assert pre.std().item() == pytest.approx(gain, rel=0.05), d_model


def test_matched_ffn_init_under_fan_in_equalises_ffn_output_scale():
    """ffn_init=matched is relative to the GPT-2 FFN initialised like the rest: under init=fan_in, every variant
    starts at the output scale of the 4·d GELU FFN with fan-in init. std(w_down) ∝ 1/√d_ff is not common to the
    variants there, so a gain computed as under GPT-2 init would leave SwiGLU (d_ff = 8/3·d) ~18% off."""
    def cfg(act: str, ffn_init: str) -> ModelConfig:
        return ModelConfig(vocab_size=256, seq_len=64, d_model=128, n_layer=4, n_head=4,
                           ffn=FFNSpec(act, budget=4), ffn_init=ffn_init, init="fan_in")

    plain = {act: ffn_output_rms_at_init(cfg(act, "gpt2")) for act in VARIANTS}
    matched = {act: ffn_output_rms_at_init(cfg(act, "matched")) for act in VARIANTS}
    assert max(plain.values()) / min(plain.values()) > 1.5
    for act, rms in matched.items():
        assert rms == pytest.approx(plain["gelu"], rel=0.10), act
    assert matched["gelu"] == plain["gelu"]  # the reference itself: a gain of exactly 1


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"init": "xavier"}, "model.init: expected gpt2, fan_in or scaled, got 'xavier'"),
    ({"init": "scaled", "init_gain": 0}, "model.init_gain: must be a positive number, got 0"),
    ({"init": "scaled", "init_gain": float("nan")}, "model.init_gain: must be a positive number, got nan"),
    ({"init": "scaled", "init_gain": "0.5"}, "model.init_gain: must be a positive number, got '0.5'"),
    ({"init": "fan_in", "init_gain": 0.55}, "model.init_gain: 0.55 scales only model.init=scaled (got init=fan_in)"),
    ({"qk_norm": "yes"}, "model.qk_norm: expected true or false, got 'yes'"),
    ({"qk_norm": True, "n_head": 16}, "model.qk_norm: heads of d_model/n_head = 32/16 = 2 dimensions"),
    ({"qk_norm": True, "d_model": 24, "n_head": 8}, "model.qk_norm: heads of d_model/n_head = 24/8 = 3 dimensions"),
])
def test_bad_init_and_qk_norm_are_one_line_errors(kwargs, message):
    with pytest.raises(ConfigError) as info:
        small(FFNSpec("gelu", width=4), **kwargs)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)
    small(FFNSpec("gelu", width=4), qk_norm=True, n_head=8)  # head_dim 4: the least it takes


# ---- model.qk_norm ----------------------------------------------------------------------------------------


def test_qk_norm_is_off_by_default_and_adds_only_its_norms():
    off = GPT(small(FFNSpec("gelu", width=4)), seed=4)
    on = GPT(small(FFNSpec("gelu", width=4), qk_norm=True), seed=4)
    assert not any("q_norm" in n or "k_norm" in n for n, _ in off.named_parameters())
    params_off, params_on = dict(off.named_parameters()), dict(on.named_parameters())
    extra = sorted(set(params_on) - set(params_off))
    assert extra == sorted(f"blocks.{i}.attn.{w}_norm.{p}" for i in range(2) for w in "qk" for p in ("weight", "bias"))
    assert set(params_off) <= set(params_on)
    for name, p in params_off.items():  # seeded by name: every other parameter starts as without it
        assert torch.equal(p, params_on[name]), name
    for name in extra:
        assert params_on[name].shape == (8,)
        assert torch.equal(params_on[name], torch.ones(8) if name.endswith("weight") else torch.zeros(8)), name


def reference_attention(attn, x: torch.Tensor, qk_norm: bool) -> torch.Tensor:
    """Causal multi-head attention by hand: per-head LayerNorm of q and k (with the module's gains and biases),
    softmax(q·kᵀ/√d_head + causal mask)·v, the output projection."""
    b, t, d = x.shape
    h = attn.n_head
    q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in attn.qkv(x).split(d, dim=-1))
    if qk_norm:
        def ln(z, norm):
            mean, var = z.mean(-1, keepdim=True), z.var(-1, unbiased=False, keepdim=True)
            return (z - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias
        q, k = ln(q, attn.q_norm), ln(k, attn.k_norm)
    scores = q @ k.transpose(-1, -2) / (d // h) ** 0.5
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    y = scores.softmax(-1) @ v
    return attn.proj(y.transpose(1, 2).reshape(b, t, d))


@pytest.mark.parametrize("qk_norm", [False, True])
def test_attention_equals_a_hand_computed_reference(qk_norm):
    model = GPT(small(FFNSpec("gelu", width=4), qk_norm=qk_norm), seed=1).eval()
    attn = model.blocks[0].attn
    with torch.no_grad():
        if qk_norm:  # gains and biases away from 1 and 0, so that a norm applied wrong (or not at all) shows
            for norm in (attn.q_norm, attn.k_norm):
                norm.weight.uniform_(0.5, 1.5, generator=torch.Generator().manual_seed(1))
                norm.bias.normal_(0, 0.3, generator=torch.Generator().manual_seed(2))
        x = torch.randn(2, 6, 32, generator=torch.Generator().manual_seed(0))
        torch.testing.assert_close(attn(x), reference_attention(attn, x, qk_norm), rtol=1e-5, atol=1e-5)
        if qk_norm:  # ... and it is not the attention without the norms
            assert not torch.allclose(attn(x), reference_attention(attn, x, False), atol=1e-3)


def test_qk_norm_bounds_the_attention_logits_whatever_the_query_weights():
    model = GPT(small(FFNSpec("gelu", width=4), qk_norm=True), seed=1).eval()
    idx = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(idx)
        for block in model.blocks:
            block.attn.qkv.weight.mul_(100.0)  # q, k and v scaled alike: LN(q), LN(k) do not move, v does
            block.attn.proj.weight.div_(100.0)
        torch.testing.assert_close(model(idx), before, rtol=1e-4, atol=1e-4)


# ---- optim.z_loss (through GPT.forward) --------------------------------------------------------------------


def test_z_loss_adds_palms_auxiliary_term_and_zero_is_the_plain_cross_entropy():
    import torch.nn.functional as F

    model = GPT(small(FFNSpec("swiglu", budget=4)), seed=0)
    with torch.no_grad():
        model.wte.weight.mul_(50)  # logits far from 0, so that logsumexp² is far from ln(V)²
    idx = torch.randint(0, 64, (3, 16), generator=torch.Generator().manual_seed(0))
    targets = torch.randint(0, 64, (3, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(idx).float()
        ce = F.cross_entropy(logits.view(-1, 64), targets.view(-1))
        by_hand = ce + 1e-2 * (torch.logsumexp(logits, dim=-1) ** 2).mean()
        assert torch.equal(model(idx, targets), ce)  # the old forward's value, bit for bit
        assert torch.equal(model(idx, targets, z_loss=0.0), ce)
        assert model(idx, targets, z_loss=1e-2) > ce + 1e-3
        torch.testing.assert_close(model(idx, targets, z_loss=1e-2), by_hand, rtol=1e-6, atol=0)
    model(idx, targets, z_loss=1e-2).backward()  # it trains: gradients reach the embedding
    assert model.wte.weight.grad.abs().sum() > 0


def test_the_loss_head_computes_exactly_what_the_inline_head_did_and_compiles_with_the_blocks():
    import torch.nn.functional as F

    from ffnbench.model.model import compile_blocks

    cfg = ModelConfig(vocab_size=64, seq_len=16, d_model=32, n_layer=2, n_head=2, ffn=FFNSpec("swiglu", budget=4))
    model = GPT(cfg, seed=3)
    idx = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(0))
    targets = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    x = model.wte(idx) + model.wpe.weight[:16]
    for block in model.blocks:
        x = block(x)
    logits = F.linear(model.ln_f(x), model.wte.weight)
    inline = F.cross_entropy(logits.float().view(-1, 64), targets.reshape(-1))
    assert torch.equal(model(idx, targets), inline)  # bit for bit: the eager default is unchanged
    assert not any(n.startswith("loss_head") for n, _ in model.named_parameters())  # no parameters of its own
    compile_blocks(model)
    assert model.loss_head._compiled_call_impl is not None and all(b._compiled_call_impl for b in model.blocks)
