"""The reference models the source articles quote (BERT-base, GPT-2 small, LLaMA-7B), as ModelConfigs.

The analytic claims (C2, C10, C11, C12; docs/claims.md) check the articles' numbers against them, and
`ffnbench params` prints their table."""

from __future__ import annotations

from dataclasses import dataclass

from ffnbench.model.ffn import FFNSpec
from ffnbench.model.model import ModelConfig

DOC_SEQ_LEN = 512  # the articles' FLOP example: one 512-token sequence


@dataclass(frozen=True)
class ReferenceModel:
    """One quoted model: its name, its shape as a ModelConfig (the FFN is what the claims check) and a
    one-line description of its FFN."""

    name: str
    cfg: ModelConfig
    note: str


def reference_models() -> list[ReferenceModel]:
    """BERT-base, GPT-2 small and LLaMA-7B, in the order the articles' table lists them."""
    return [
        ReferenceModel(
            "BERT-base",
            ModelConfig(vocab_size=30522, seq_len=512, d_model=768, n_layer=12, n_head=12, attn_bias=True,
                        ffn=FFNSpec("gelu", width=4, bias=True)),
            "768→3072→768, GELU, biases",
        ),
        ReferenceModel(
            "GPT-2 small",
            ModelConfig(vocab_size=50257, seq_len=1024, d_model=768, n_layer=12, n_head=12, attn_bias=True,
                        ffn=FFNSpec("gelu", width=4, bias=True, approximate="tanh")),
            "768→3072→768, GELU (tanh), biases",
        ),
        ReferenceModel(
            "LLaMA-7B",
            ModelConfig(vocab_size=32000, seq_len=2048, d_model=4096, n_layer=32, n_head=32, attn_bias=False,
                        ffn=FFNSpec("swiglu", budget=4, bias=False, multiple_of=256, rounding="up")),
            "SwiGLU, 3 matrices, no bias; d_ff = 2/3·4·d rounded up to 256",
        ),
    ]


def reference_model(name: str) -> ReferenceModel:
    """One reference model by name; KeyError names the known ones."""
    models = {m.name: m for m in reference_models()}
    if name not in models:
        raise KeyError(f"no reference model {name!r}; known: {', '.join(models)}")
    return models[name]
