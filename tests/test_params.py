"""`ffnbench params`: the documents' numbers, exactly, and a config's breakdown."""

import subprocess
import sys

import pytest

from ffnbench.accounting import count_params
from ffnbench.params import derivations, reference_models


def test_reference_models_reproduce_the_documents():
    refs = {r.name: count_params(r.cfg) for r in reference_models()}
    assert refs["BERT-base"].ffn_per_layer == 4_722_432
    assert refs["BERT-base"].attention_per_layer == 2_362_368
    assert refs["GPT-2 small"].ffn_per_layer == 4_722_432
    assert refs["LLaMA-7B"].ffn_per_layer == 135_266_304
    assert refs["LLaMA-7B"].d_ff == 11008
    assert refs["BERT-base"].ffn_per_layer * 4 == 18_889_728  # ≈ 18.9 MB
    assert refs["BERT-base"].ffn_total * 4 == 226_676_736  # ≈ 227 MB for 12 layers
    assert "10922.67" in derivations()[0] and "11008 (= 43·256)" in derivations()[0]


def run_params(*args):
    return subprocess.run([sys.executable, "-m", "ffnbench", "params", *args], capture_output=True, text=True)


def test_params_command_prints_the_table():
    out = run_params()
    assert out.returncode == 0, out.stderr
    for needle in ("4,722,432", "2,362,368", "135,266,304", "11008", "10922.67", "66.7%", "18.9 MB",
                   "226.7 MB", "4.832e+09"):
        assert needle in out.stdout, needle


def test_params_command_for_a_config():
    out = run_params("model=tiny", "ffn=swiglu", "ffn.budget=4")
    assert out.returncode == 0, out.stderr
    assert "341.33 → 342" in out.stdout and "131,328" in out.stdout and "+0.195%" in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [(["ffn=nope"], "Could not find 'ffn/nope'"), (["ffn.width=2", "ffn.budget=4"], "both given"),
     (["model.n_head=5"], "not divisible"), (["ffn=swiglu", "ffn.multiple_of=64"], "max_mismatch")],
)
def test_params_command_bad_input(args, message):
    out = run_params(*args)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
