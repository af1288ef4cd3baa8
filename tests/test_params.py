"""`ffnbench params`: the documents' numbers, exactly, and a config's breakdown."""

import subprocess
import sys

import pytest

from ffnbench.params import derivations


def test_derivations_recompute_the_documents_sizing_facts():
    llama, swiglu = derivations()
    assert "2/3·4·4096 = 10922.67" in llama and "11008 (= 43·256)" in llama
    assert "d_ff = 2048, 3·d·d_ff = 4,718,592 = 8·d² = 4,718,592" in swiglu and "2·d·4d = 4,718,592" in swiglu


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
    assert "341.33 → 341" in out.stdout and "130,944" in out.stdout and "-0.098%" in out.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [(["ffn=nope"], "Could not find 'ffn/nope'"), (["ffn.width=2", "ffn.budget=4"], "both given"),
     (["model.n_head=5"], "not divisible"), (["ffn=swiglu", "ffn.multiple_of=64"], "max_mismatch")],
)
def test_params_command_bad_input(args, message):
    out = run_params(*args)
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr


def test_params_help_says_what_it_prints_and_takes():
    out = run_params("--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: ffnbench params [HYDRA_OVERRIDES ...]")
    assert "model=tiny ffn=swiglu" in out.stdout
