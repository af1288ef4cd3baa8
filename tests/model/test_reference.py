"""The reference models reproduce the counts the articles quote, exactly."""

import pytest

from ffnbench.model.accounting import count_params
from ffnbench.model.reference import reference_model, reference_models


def test_reference_models_reproduce_the_documents():
    refs = {r.name: count_params(r.cfg) for r in reference_models()}
    assert list(refs) == ["BERT-base", "GPT-2 small", "LLaMA-7B"]
    assert refs["BERT-base"].ffn_per_layer == 4_722_432
    assert refs["BERT-base"].attention_per_layer == 2_362_368
    assert refs["GPT-2 small"].ffn_per_layer == 4_722_432
    assert refs["LLaMA-7B"].ffn_per_layer == 135_266_304
    assert refs["LLaMA-7B"].d_ff == 11008
    assert refs["BERT-base"].ffn_per_layer * 4 == 18_889_728  # ≈ 18.9 MB
    assert refs["BERT-base"].ffn_total * 4 == 226_676_736  # ≈ 227 MB for 12 layers


def test_reference_model_by_name():
    assert reference_model("LLaMA-7B").cfg.d_model == 4096
    with pytest.raises(KeyError, match="known: BERT-base, GPT-2 small, LLaMA-7B"):
        reference_model("GPT-3")
