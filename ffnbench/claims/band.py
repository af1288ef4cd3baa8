"""The practice band (DESIGN §9): a verdict is decided from the settings whose FFN starts where published models
start, and every other setting is a sensitivity check, shown with a label and never changing the verdict.

What places a setting is the std of the FFN pre-activations at init. The FFN's input is a LayerNorm output (unit RMS
per token at init), so with input weights N(0, σ²) the pre-activations are N(0, σ²·d_model): GPT-2's fixed
σ = 0.02 gives 0.02·√d_model, fan_in (σ² = 1/d_model) gives 1 at any width, and init=scaled its gain. The regime
table measures it on each setting's model (report.regime); a test holds the two within 5%.

The band is pre-registered here, from the documents' own models, before any verdict was read under it:
BERT-base and GPT-2 small start at 0.02·√768 = 0.55, LLaMA-7B at 0.02·√4096 = 1.28 (articles 000-004 size these
three); the band leaves room either side: [0.4, 2.0]. GPT-2's init at d_model 64 (0.16) lies outside, at the GPU
presets' `small` (d_model 384: 0.39) just outside, at `base` (768: 0.55) inside."""

from __future__ import annotations

import math
from typing import Any

PRACTICE_BAND = (0.4, 2.0)
BAND_SOURCES = ("BERT-base and GPT-2 small: N(0, 0.02) at d_model 768 → 0.55; LLaMA-7B: N(0, 0.02) at d_model 4096 → "
                "1.28; the band leaves room either side")
GPT2_STD = 0.02  # model.INIT_STD, restated so that the band needs no torch


def preactivation_std(setting: Any) -> float | None:
    """The FFN pre-activation std at init that a setting's init gives (module docstring); None when the setting
    does not say its d_model under GPT-2's init."""
    s = dict(setting)
    init = s.get("model.init") or "gpt2"
    if init == "fan_in":
        return 1.0
    if init == "scaled":
        return float(s.get("model.init_gain") or 1.0)
    d = s.get("model.d_model")
    return GPT2_STD * math.sqrt(d) if d else None


def in_band(setting: Any) -> bool:
    """Whether the setting's FFN starts inside the practice band (where verdicts are decided)."""
    std = preactivation_std(setting)
    return std is not None and PRACTICE_BAND[0] <= std <= PRACTICE_BAND[1]


def centre_distance(setting: Any) -> float:
    """How far the setting's init starts from the band's centre (the geometric mean of its edges, 0.89), in log
    units: the deciding init among several in the band is the nearest (fan_in's 1.0 before GPT-2 small's 0.55)."""
    std = preactivation_std(setting)
    return abs(math.log(std) - math.log(math.sqrt(PRACTICE_BAND[0] * PRACTICE_BAND[1]))) if std else math.inf


def outside(setting: Any) -> str:
    """The label of a setting outside the band: 'init std 0.16, outside practice'."""
    std = preactivation_std(setting)
    return f"init std {std:.2f}, outside practice" if std is not None else "init std unknown"
