"""FFN registry: forward against the formula written out, exact sizing and parameter counts, bad input."""

import math
import re
from pathlib import Path

import pytest
import torch

from ffnbench.errors import ConfigError
from ffnbench.model.ffn import (
    VARIANTS,
    ActivationStats,
    FeedForward,
    FFNSpec,
    budget_nominal_hidden_size,
    ffn_param_count,
    hidden_second_moment,
    matched_output_gain,
    round_to_multiple,
    round_up,
    size_ffn,
)

# The reference nonlinearities, written independently of ffn.py.
REFERENCE = {
    "relu": lambda x: torch.clamp(x, min=0),
    "gelu": lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2))),
    "swish": lambda x: x / (1 + torch.exp(-x)),
    "relu2": lambda x: torch.clamp(x, min=0) ** 2,
    "linear": lambda x: x,
    "glu": lambda x: 1 / (1 + torch.exp(-x)),
    "bilinear": lambda x: x,
    "reglu": lambda x: torch.clamp(x, min=0),
    "geglu": lambda x: 0.5 * x * (1 + torch.erf(x / math.sqrt(2))),
    "swiglu": lambda x: x / (1 + torch.exp(-x)),
}
GATED = {"glu", "bilinear", "reglu", "geglu", "swiglu"}


def test_registry_is_the_documented_set():
    assert set(VARIANTS) == set(REFERENCE)
    assert {n for n, v in VARIANTS.items() if v.gated} == GATED


# Inputs that reach every regime of a nonlinearity: far negative (where GELU and Swish underflow to 0, a ReLU is
# flat), around 0 (where they differ most from linear), the 3-6.5 range where capped or clipped variants bend, and far
# positive (a cap at 6 shows). A variant implemented as its neighbour (relu6 as relu) fails here.
REGIMES = torch.tensor([-50.0, -30.0, -10.0, -6.5, -6.0, -5.5, -3.0, -1.0, -0.5, -1e-3, -1e-9, 0.0, 1e-9, 1e-3, 0.5,
                        1.0, 3.0, 5.5, 6.0, 6.5, 10.0, 30.0, 50.0], dtype=torch.double)


@pytest.mark.parametrize("act", sorted(REFERENCE))
def test_every_variants_nonlinearity_matches_its_reference_over_every_regime(act):
    ffn = FeedForward(4, FFNSpec(act, width=2)).double()
    torch.testing.assert_close(ffn.activation(REGIMES), REFERENCE[act](REGIMES), rtol=1e-12, atol=1e-12)


ROOT = Path(__file__).resolve().parents[2]


def readme_variant_rows(text: str) -> dict[str, int]:
    """README's variant table ("## The FFN variants": | `name` (`alias`) | activation | matrices |) as {name or
    alias: matrices}."""
    section = text.split("## The FFN variants", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 3:
            for name in re.findall(r"`([^`]+)`", cells[0]):
                rows[name] = int(cells[2])
    return rows


@pytest.mark.parametrize("act", sorted(REFERENCE))
def test_every_variant_has_its_config_and_a_readme_row(act):
    """A registry variant without conf/ffn/<act>.yaml cannot be selected (`ffn=<act>`: "Could not find"); one
    without a row in README's variant table is undocumented, and a row with the wrong number of matrices (3 for a
    gated FFN, 2 otherwise) misdocuments it."""
    conf = ROOT / "conf" / "ffn" / f"{act}.yaml"
    assert conf.is_file(), f"{conf.relative_to(ROOT)} is missing: `ffn={act}` cannot be selected"
    assert f"act: {act}" in conf.read_text()
    rows = readme_variant_rows((ROOT / "README.md").read_text())
    assert act in rows, f"README.md's variant table has no row for `{act}`"
    assert rows[act] == (3 if act in GATED else 2), f"README.md: `{act}` has {rows[act]} matrices in its row"


def test_the_readme_row_check_reads_the_table():
    """The parser finds every row and alias of the real table, and a table without a variant's row lacks it."""
    text = (ROOT / "README.md").read_text()
    rows = readme_variant_rows(text)
    assert set(rows) == set(REFERENCE) | {"silu"} and rows["silu"] == rows["swish"] == 2
    assert "geglu" not in readme_variant_rows(re.sub(r"^\| `geglu` .*\n", "", text, flags=re.M))


@pytest.mark.parametrize("act", sorted(REFERENCE))
@pytest.mark.parametrize("bias", [False, True])
def test_forward_matches_reference_formula(act, bias):
    torch.manual_seed(0)
    d = 16
    ffn = FeedForward(d, FFNSpec(act, width=3, bias=bias)).double()
    if bias:  # non-zero biases, so that a missing bias would show
        for p in ffn.parameters():
            if p.ndim == 1:
                p.data.normal_()
    x = torch.randn(2, 5, d, dtype=torch.double)
    phi = REFERENCE[act]

    def lin(layer, v):
        out = v @ layer.weight.T
        return out + layer.bias if bias else out

    if act in GATED:
        hidden = phi(lin(ffn.w_gate, x)) * lin(ffn.w_up, x)
    else:
        hidden = phi(lin(ffn.w_up, x))
    expected = lin(ffn.w_down, hidden)
    torch.testing.assert_close(ffn(x), expected, rtol=1e-10, atol=1e-10)


def test_gelu_tanh_approximation_option():
    d = 8
    ffn = FeedForward(d, FFNSpec("gelu", width=2, approximate="tanh")).double()
    x = torch.randn(4, d, dtype=torch.double)
    u = x @ ffn.w_up.weight.T
    tanh_gelu = 0.5 * u * (1 + torch.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
    torch.testing.assert_close(ffn(x), tanh_gelu @ ffn.w_down.weight.T)
    exact = FeedForward(d, FFNSpec("gelu", width=2)).double()
    exact.load_state_dict(ffn.state_dict())
    assert not torch.allclose(exact(x), ffn(x), rtol=0, atol=1e-12)


def test_silu_is_an_alias_of_swish():
    assert FFNSpec("silu", width=4).act == "swish"


SIZINGS = [{"width": 2}, {"width": 4}, {"width": 8}, {"budget": 2}, {"budget": 8 / 3}, {"budget": 4},
           {"budget": 8}, {"width": 4, "multiple_of": 64}, {"budget": 4, "multiple_of": 7}]


@pytest.mark.parametrize("act", sorted(REFERENCE))
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("sizing", SIZINGS, ids=lambda s: "-".join(f"{k}{v:.3g}" for k, v in s.items()))
def test_analytic_param_count_equals_module(act, bias, sizing):
    d = 48
    spec = FFNSpec(act, bias=bias, **sizing)
    module = FeedForward(d, spec)
    size = size_ffn(spec, d)
    assert size.params == sum(p.numel() for p in module.parameters())
    assert size.d_ff == module.w_down.in_features
    assert size.d_ff % spec.multiple_of == 0 and abs(size.d_ff - size.nominal_d_ff) <= spec.multiple_of / 2 + 1e-6


@pytest.mark.parametrize("act", sorted(GATED))
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("ratio", [2, 8 / 3, 4, 8])
@pytest.mark.parametrize("multiple_of", [1, 8])
def test_budget_matches_ungated_within_half_a_rounding_step(act, bias, ratio, multiple_of):
    d = 96
    size = size_ffn(FFNSpec(act, budget=ratio, bias=bias, multiple_of=multiple_of), d)
    ungated_target = 2 * d * ratio * d + ((ratio * d + d) if bias else 0)
    one_step = ffn_param_count(d, multiple_of, gated=True, bias=bias) - (d if bias else 0)  # params per step
    assert abs(size.params - ungated_target) <= one_step / 2 + 1e-6  # nearest: off by half a step at most
    assert size.mismatch == pytest.approx((size.params - ungated_target) / ungated_target)
    assert size.target_params == pytest.approx(ungated_target)


def test_ungated_budget_equals_width():
    for act in ("relu", "gelu", "linear"):
        assert size_ffn(FFNSpec(act, budget=4), 128).d_ff == size_ffn(FFNSpec(act, width=4), 128).d_ff == 512
        assert size_ffn(FFNSpec(act, budget=4), 128).mismatch == 0


def test_swiglu_budget_4_is_8_thirds_and_llama_rounding():
    assert budget_nominal_hidden_size(768, 4, gated=True, bias=False) == pytest.approx(2048)
    assert size_ffn(FFNSpec("swiglu", budget=4), 768).d_ff == 2048
    for rounding in ("up", "nearest"):  # LLaMA's rule is "up"; 42.67 steps of 256 is 43 either way
        llama = size_ffn(FFNSpec("swiglu", budget=4, multiple_of=256, rounding=rounding), 4096)
        assert llama.nominal_d_ff == pytest.approx(10922.666, abs=1e-2)
        assert llama.d_ff == 11008 == 43 * 256
        assert llama.params == 135_266_304


def test_gated_budget_rounds_to_the_nearest_size_and_records_the_miss_either_way():
    swiglu = size_ffn(FFNSpec("swiglu", budget=4), 128)  # 2/3·512 = 341.33: down to 341, not up to 342
    assert (swiglu.d_ff, swiglu.params, swiglu.target_params) == (341, 3 * 128 * 341, 2 * 128 * 512)
    assert swiglu.mismatch == (3 * 128 * 341 - 2 * 128 * 512) / (2 * 128 * 512) == -1 / 1024
    up = size_ffn(FFNSpec("swiglu", budget=4, rounding="up"), 128)
    assert (up.d_ff, up.mismatch) == (342, (3 * 128 * 342 - 2 * 128 * 512) / (2 * 128 * 512))
    above = size_ffn(FFNSpec("swiglu", budget=2), 128)  # 2/3·256 = 170.67: up to 171
    assert above.d_ff == 171 and above.mismatch == (3 * 128 * 171 - 2 * 128 * 256) / (2 * 128 * 256) > 0
    assert FFNSpec("swiglu", budget=4, rounding="up").label == "swiglu-b4-nobias-up"


def test_round_to_multiple_nearest_ties_up_and_absorbs_float_error():
    assert round_up(8 / 3 * 768, 1) == round_to_multiple(8 / 3 * 768, 1) == 2048
    assert round_up(10922.67, 256) == 11008
    assert round_up(3072.0, 64) == round_to_multiple(3072.0, 64) == 3072
    assert round_to_multiple(341.33, 1) == 341 and round_up(341.33, 1) == 342
    assert round_to_multiple(96.0, 64) == 128 and round_to_multiple(95.9, 64) == 64  # a tie goes up
    assert round_to_multiple(10.0, 64) == round_up(10.0, 64) == 64  # never below one multiple
    with pytest.raises(ConfigError, match="rounding"):
        round_to_multiple(10.0, 8, "down")


def test_matched_gain_gives_every_variant_the_gelu_ffns_output_variance():
    d, std = 128, 0.02
    s = std * math.sqrt(d)
    assert hidden_second_moment(FFNSpec("linear", width=4), s) == pytest.approx(s**2, rel=1e-12)
    assert hidden_second_moment(FFNSpec("relu", width=4), s) == pytest.approx(s**2 / 2, rel=1e-12)
    assert hidden_second_moment(FFNSpec("relu2", width=4), s) == pytest.approx(1.5 * s**4, rel=1e-12)
    assert hidden_second_moment(FFNSpec("bilinear", width=4), s) == pytest.approx(s**4, rel=1e-12)
    assert matched_output_gain(FFNSpec("gelu", budget=4), d, std) == 1.0  # the reference itself: unchanged
    assert matched_output_gain(FFNSpec("linear", budget=4), d, std) == pytest.approx(
        math.sqrt(hidden_second_moment(FFNSpec("gelu", width=4), s) / s**2))
    for act in VARIANTS:  # d_ff · E[h²] · gain² is the reference's
        spec = FFNSpec(act, budget=4)
        gain = matched_output_gain(spec, d, std)
        assert size_ffn(spec, d).d_ff * hidden_second_moment(spec, s) * gain**2 == pytest.approx(
            512 * hidden_second_moment(FFNSpec("gelu", width=4), s), rel=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"act": "tanhglu", "width": 4}, "ffn.act"),
        ({"act": "relu"}, "ffn.width / ffn.budget"),
        ({"act": "relu", "width": 4, "budget": 4}, "ffn.width / ffn.budget"),
        ({"act": "relu", "width": 0}, "ffn.width"),
        ({"act": "relu", "budget": -2}, "ffn.budget"),
        ({"act": "relu", "width": float("nan")}, "ffn.width"),
        ({"act": "relu", "width": 4, "multiple_of": 0}, "ffn.multiple_of"),
        ({"act": "relu", "width": 4, "approximate": "tanh"}, "ffn.approximate"),
        ({"act": "relu", "width": 4, "rounding": "down"}, "ffn.rounding"),
    ],
)
def test_bad_specs_fail_at_construction_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.").replace("/", "/")) as info:
        FFNSpec(**kwargs)
    if field == "ffn.act":
        assert "swiglu" in str(info.value) and "relu" in str(info.value)  # the known variants are listed
    assert isinstance(info.value, ConfigError)


def test_activation_stats_are_exact_on_a_hand_built_case():
    ffn = FeedForward(2, FFNSpec("relu", width=2))  # d_ff = 4
    with torch.no_grad():
        ffn.w_up.weight.copy_(torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]]))
    ffn.stats = ActivationStats(4, torch.device("cpu"))
    # Tokens (1, 1) and (2, -1): unit 1 (−x₀) is never active; unit 3 (−x₁) is active once.
    ffn(torch.tensor([[1.0, 1.0], [2.0, -1.0]]))
    s = ffn.stats.summary()
    # pre-activations: t0 = (1, -1, 1, -1), t1 = (2, -2, -1, 1): four of eight are ≤ 0 → relu gives 0
    assert s["zero_frac"] == 4 / 8
    assert s["dead_frac"] == 1 / 4
    assert s["never_positive_frac"] == 1 / 4


def test_stats_off_by_default_and_do_not_change_output():
    ffn = FeedForward(8, FFNSpec("reglu", budget=4))
    x = torch.randn(3, 8)
    y0 = ffn(x)
    ffn.stats = ActivationStats(ffn.size.d_ff, torch.device("cpu"))
    torch.testing.assert_close(ffn(x), y0)
    assert ffn.stats.count == 3 * ffn.size.d_ff
