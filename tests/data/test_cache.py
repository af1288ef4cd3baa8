"""The token cache (ffnbench.data.cache): a damaged cache is rebuilt, setup without one says to prepare, a BPE
tokenizer is trained on train only, cached and reused."""

import math
import re

import numpy as np
import pytest

from ffnbench.data.cache import unigram_loss
from ffnbench.data.tokenizer import BPE_FILE, BPETokenizer
from ffnbench.errors import DataError

from .helpers import corpus_record, decode_split, make_dm, ready, text_folder


def test_a_damaged_cache_is_rebuilt_with_a_warning(tmp_path):
    text_folder(tmp_path / "docs")
    dm = ready(make_dm(tmp_path, path=str(tmp_path / "docs")))
    train, val = decode_split(dm, "train"), decode_split(dm, "val")
    bin_path = dm.token_dir / "train.bin"
    damages = {
        "truncated": lambda: bin_path.write_bytes(bin_path.read_bytes()[:-10]),
        "flipped": lambda: bin_path.write_bytes(bytes([bin_path.read_bytes()[0] ^ 1]) + bin_path.read_bytes()[1:]),
        "meta": lambda: (dm.token_dir / "val.json").write_text("{oops"),
    }
    for damage, match in zip(damages.values(), ("bytes where its meta says", "content does not match", "unreadable")):
        damage()
        with pytest.warns(UserWarning, match=f"{re.escape(str(dm.token_dir))}.*{match}.*rebuilding it"):
            again = ready(make_dm(tmp_path, path=str(tmp_path / "docs")))
        assert again.info["from_cache"] is False
        assert (decode_split(again, "train"), decode_split(again, "val")) == (train, val)
    assert ready(make_dm(tmp_path, path=str(tmp_path / "docs"))).info["from_cache"] is True


def test_setup_without_a_cache_says_to_prepare(tmp_path):
    text_folder(tmp_path / "docs")
    with pytest.raises(DataError, match=r"call prepare_data"):
        make_dm(tmp_path, path=str(tmp_path / "docs")).setup()


def test_bpe_is_trained_on_train_only_cached_and_reused(tmp_path, monkeypatch):
    text_folder(tmp_path / "docs")
    dm = ready(make_dm(tmp_path, path=str(tmp_path / "docs"), tokenizer="bpe", vocab_size=300))
    tok = BPETokenizer.load(dm.token_dir / BPE_FILE, 300)
    record = corpus_record(dm)
    texts = {rel: (tmp_path / "docs" / rel).read_text() for rel in record["splits"]["train"]["ids"]}
    assert tok.decode(dm.train_tokens) == "".join(t + "\n\n" for t in texts.values())
    assert dm.info["train"]["tokens"] < dm.info["train"]["bytes"] and dm.train_tokens.dtype == np.uint16
    # The exact bytes of the validation targets, over their count:
    targets = np.concatenate([np.asarray(dm.val_tokens[o + 1:o + 17]) for o in dm.val_offsets])
    expected = len(tok.decode(targets).encode())
    assert dm.val_bytes_per_token == pytest.approx(expected / len(targets))

    trained = (dm.token_dir / BPE_FILE).stat().st_mtime_ns
    monkeypatch.setattr(BPETokenizer, "train", lambda *a, **k: pytest.fail("retrained the cached BPE"))
    (dm.token_dir / "train.bin").unlink()
    with pytest.warns(UserWarning, match=r"file is missing"):
        again = ready(make_dm(tmp_path, path=str(tmp_path / "docs"), tokenizer="bpe", vocab_size=300))
    assert (again.token_dir / BPE_FILE).stat().st_mtime_ns == trained
    assert (np.asarray(again.train_tokens) == np.asarray(dm.train_tokens)).all()


def test_the_unigram_loss_is_the_entropy_of_the_token_counts():
    assert unigram_loss([1, 1, 1, 1]) == pytest.approx(math.log(4))
    assert unigram_loss([5, 0, 0]) == 0.0
    with pytest.raises(ValueError):
        unigram_loss([0, 0])
