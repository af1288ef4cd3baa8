"""The model: only the FFN varies, init is identical outside the FFN, shapes, and bad input."""

import pytest
import torch

from ffnbench.errors import ConfigError
from ffnbench.ffn import FFNSpec
from ffnbench.model import GPT, ModelConfig, is_ffn_param


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
     ({"dropout": 1.5}, "model.dropout")],
)
def test_bad_model_configs(kwargs, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        small(FFNSpec("gelu", width=4), **kwargs)


def test_sequence_longer_than_context_is_refused():
    model = GPT(small(FFNSpec("gelu", width=4)))
    with pytest.raises(ConfigError, match="seq_len"):
        model(torch.zeros(1, 17, dtype=torch.long))
