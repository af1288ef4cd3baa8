"""`ffnbench sample`: a run's checkpoint and tokenizer write text, the same for the same seed; the most likely token
at temperature 0; bad input is one line and exit 2."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from ffnbench.errors import ConfigError, RunDirError
from ffnbench.runs.rundir import RUN_CONFIG_FILE, last_checkpoint
from ffnbench.sample import Sampler, load_sampler


def test_the_sampler_holds_the_runs_last_checkpoint_and_tokenizer(finished):
    result, run_dir, _ = finished
    sampler = load_sampler(run_dir)
    assert sampler.step == result.steps == 40 and sampler.tokenizer.id == "byte"
    saved = torch.load(last_checkpoint(run_dir), map_location="cpu", weights_only=False)["state_dict"]
    weights = sampler.model.state_dict()
    assert weights.keys() == {k.removeprefix("model.") for k in saved if k.startswith("model.")}
    assert all(torch.equal(weights[k.removeprefix("model.")], v) for k, v in saved.items() if k.startswith("model."))
    assert not sampler.model.training  # dropout off


def test_the_same_seed_writes_the_same_text_and_another_seed_other_text(finished):
    sampler = load_sampler(finished[1])
    ids = sampler.encode("ROMEO:")
    assert ids == list(b"ROMEO:")
    first = sampler.generate(ids, 50, 1.0, seed=3)
    assert len(first) == 50 and all(0 <= t < 256 for t in first)
    assert sampler.generate(ids, 50, 1.0, seed=3) == first
    assert sampler.generate(ids, 50, 1.0, seed=4) != first


def test_temperature_zero_takes_the_most_likely_token_over_the_last_seq_len_tokens(finished):
    sampler = load_sampler(finished[1])
    seq_len = sampler.model.cfg.seq_len
    ids = list(b"To be, or not to be, that is the question: whether 'tis nobler")[: seq_len + 5]
    assert len(ids) > seq_len  # the context is cropped to the model's window
    new = sampler.generate(ids, 3, 0.0, seed=0)
    context = list(ids)
    for token in new:
        with torch.no_grad():
            logits = sampler.model(torch.tensor([context[-seq_len:]]))[0, -1]
        assert token == int(logits.argmax())
        context.append(token)
    assert sampler.generate(ids, 3, 0.0, seed=1) == new  # no draw: the seed plays no part


class _NoDigits:
    """A tokenizer that knows no digits (as a BPE trained without byte fallback would not)."""

    id, vocab_size = "nodigits", 256

    def encode_batch(self, texts):
        return [np.frombuffer("".join(c for c in t if not c.isdigit()).encode(), dtype=np.uint8) for t in texts]

    def decode(self, ids):
        return bytes(int(i) for i in ids).decode()


def test_a_prompt_the_tokenizer_cannot_encode_or_an_empty_one_is_refused_naming_the_characters(finished):
    sampler = load_sampler(finished[1])
    stub = Sampler(sampler.model, _NoDigits(), sampler.step)
    assert stub.encode("act i") == list(b"act i")
    with pytest.raises(ConfigError, match=r"^--prompt: the nodigits tokenizer of this run cannot encode '1', '7'; "
                                          r"leave out those characters$"):
        stub.encode("act 1 scene 7")
    with pytest.raises(ConfigError, match=r"^--prompt: empty"):
        sampler.encode("")


def test_a_directory_without_a_run_or_a_checkpoint_is_refused(finished, tmp_path):
    with pytest.raises(RunDirError, match="no such run directory"):
        load_sampler(tmp_path / "absent")
    with pytest.raises(RunDirError, match=r"not a run directory \(no run_config.json\)"):
        load_sampler(tmp_path)
    shutil.copy(finished[1] / RUN_CONFIG_FILE, tmp_path / RUN_CONFIG_FILE)
    with pytest.raises(RunDirError, match=r"no checkpoint yet .*train it \(further\) first"):
        load_sampler(tmp_path)


def _sample(*args, cwd):
    return subprocess.run([sys.executable, "-m", "ffnbench", "sample", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def test_the_command_prints_the_prompt_and_its_continuation_and_bad_input_is_one_line_exit_2(finished, tmp_path):
    run_dir = finished[1]
    out = _sample(run_dir, "--prompt", "ROMEO:", "--tokens", "20", "--seed", "5", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    sampler = load_sampler(run_dir)
    expected = "ROMEO:" + sampler.tokenizer.decode(sampler.generate(list(b"ROMEO:"), 20, 0.8, seed=5))
    assert out.stdout == expected + "\n"
    assert out.stderr == f"ffnbench: {run_dir.name}: step 40, 20 tokens, temperature 0.8, seed 5\n"
    for args, message in [((tmp_path / "absent",), "no such run directory"),
                          ((run_dir, "--prompt", ""), "--prompt: empty")]:
        bad = _sample(*args, cwd=tmp_path)
        assert bad.returncode == 2 and bad.stderr.startswith("ffnbench: error: ") and bad.stderr.count("\n") == 1
        assert message in bad.stderr
    bad = _sample(run_dir, "--tokens", "0", cwd=tmp_path)  # argparse's own: its usage line, then the error
    assert bad.returncode == 2 and "--tokens: must be a positive integer, got 0" in bad.stderr
    bad = _sample(run_dir, "--seed", str(2**64), cwd=tmp_path)
    assert bad.returncode == 2 and "--seed: must be an integer in [0, 2**63)" in bad.stderr
    # a temperature so small that logits / T overflow: the most likely token, as at temperature 0
    sampler = load_sampler(run_dir)
    assert sampler.generate(list(b"ROMEO:"), 5, 1e-50, seed=1) == sampler.generate(list(b"ROMEO:"), 5, 0.0, seed=1)
    assert json.loads((run_dir / RUN_CONFIG_FILE).read_text())["data"]["tokenizer"] == "byte"
