"""Tokenizers: byte (default, 256 symbols, no download), bpe (trained with `tokenizers`), gpt2 (tiktoken)."""

from __future__ import annotations

from collections.abc import Mapping

from ffnbench.errors import ConfigError

TOKENIZERS = ("byte", "bpe", "gpt2")
GPT2_VOCAB_SIZE = 50257


def vocab_size_for(data_cfg: Mapping) -> int:
    """The vocabulary size a data config implies, known without reading any data."""
    name = data_cfg.get("tokenizer", "byte")
    if name == "byte":
        return 256
    if name == "bpe":
        return int(data_cfg["vocab_size"])
    if name == "gpt2":
        return GPT2_VOCAB_SIZE
    raise ConfigError(f"data.tokenizer: unknown tokenizer {name!r}; known tokenizers: {', '.join(TOKENIZERS)}")
