"""Tokenizers: ids, lossless round trips, exact byte lengths per token, a cached BPE, gpt2 offline."""

import socket

import numpy as np
import pytest

from ffnbench.data.tokenizer import (
    BPE_FILE,
    GPT2_URLS,
    PROBE_TIMEOUT_S,
    BPETokenizer,
    ByteTokenizer,
    TiktokenTokenizer,
    load_tokenizer,
    token_dtype,
    tokenizer_id,
    vocab_size_for,
)
from ffnbench.errors import ConfigError, DataError

TEXTS = ["To be, or not to be: that is the question.\n\n", "Ça va — naïve café, 日本語 ✓\n\n",
         "  leading spaces and trailing  \n\n", "x"]


def test_vocab_size_and_id_come_from_the_config_alone():
    assert vocab_size_for({"tokenizer": "byte"}) == 256
    assert vocab_size_for({"tokenizer": "bpe", "vocab_size": 4096}) == 4096
    assert vocab_size_for({"tokenizer": "gpt2"}) == 50257
    assert tokenizer_id({"tokenizer": "bpe", "vocab_size": 512}) == "bpe512"
    assert tokenizer_id({"tokenizer": "gpt2"}) == "gpt2"
    with pytest.raises(ConfigError, match=r"unknown tokenizer 'wordpiece'.*byte, bpe, gpt2"):
        vocab_size_for({"tokenizer": "wordpiece"})
    with pytest.raises(ConfigError, match=r"data.vocab_size.*at least 256"):
        vocab_size_for({"tokenizer": "bpe", "vocab_size": 100})
    assert token_dtype(65536) == np.uint16 and token_dtype(65537) == np.uint32


def _check_lossless(tok, texts=TEXTS):
    for text, ids in zip(texts, tok.encode_batch(texts)):
        assert tok.decode(ids) == text
        assert ids.max() < tok.vocab_size
        assert tok.token_byte_lengths()[ids].sum() == len(text.encode("utf-8"))  # exact bytes per token


def test_byte_tokenizer():
    tok = ByteTokenizer()
    _check_lossless(tok)
    assert (tok.token_byte_lengths() == 1).all() and len(tok.token_byte_lengths()) == 256


def test_bpe_trains_round_trips_and_is_reused(tmp_path, monkeypatch):
    corpus = [t * 20 for t in TEXTS]
    cfg = {"tokenizer": "bpe", "vocab_size": 320}
    tok = load_tokenizer(cfg, tmp_path, lambda: iter(corpus))
    assert isinstance(tok, BPETokenizer) and tok.vocab_size == 320 and tok.id == "bpe320"
    _check_lossless(tok)
    lengths = tok.token_byte_lengths()
    assert len(lengths) == 320 and (lengths[:256] == 1).all() and lengths.max() > 1
    assert len(tok.encode_batch([TEXTS[0]])[0]) < len(TEXTS[0])  # it learned merges

    saved = (tmp_path / BPE_FILE).stat().st_mtime_ns

    def no_training(*args, **kwargs):
        raise AssertionError("retrained a BPE that was on disk")

    monkeypatch.setattr(BPETokenizer, "train", no_training)
    again = load_tokenizer(cfg, tmp_path, lambda: iter(corpus))
    assert (tmp_path / BPE_FILE).stat().st_mtime_ns == saved
    assert [a.tolist() for a in again.encode_batch(TEXTS)] == [a.tolist() for a in tok.encode_batch(TEXTS)]


def test_unreadable_bpe_is_retrained_with_a_warning(tmp_path):
    (tmp_path / BPE_FILE).write_text("{not json")
    with pytest.warns(UserWarning, match=r"unreadable BPE tokenizer.*retraining"):
        tok = load_tokenizer({"tokenizer": "bpe", "vocab_size": 300}, tmp_path, lambda: iter(TEXTS * 5))
    _check_lossless(tok)
    with pytest.raises(DataError, match=r"no trained BPE"):
        load_tokenizer({"tokenizer": "bpe", "vocab_size": 300}, tmp_path / "empty")


def test_tiktoken_wrapper_on_a_toy_encoding():
    import tiktoken

    ranks = {bytes([i]): i for i in range(256)} | {b"ab": 256, b"abc": 257}
    enc = tiktoken.Encoding(name="toy", pat_str=r"\S+|\s+", mergeable_ranks=ranks, special_tokens={"<|end|>": 258})
    tok = TiktokenTokenizer(enc, "toy", num_threads=2)
    assert tok.vocab_size == 259
    assert tok.encode_batch(["abc ab"])[0].tolist() == [257, 32, 256]
    lengths = tok.token_byte_lengths()
    assert lengths[257] == 3 and lengths[256] == 2 and lengths[258] == 0  # the special token is never produced
    _check_lossless(tok)


def test_gpt2_offline_fails_fast_with_the_fix(tmp_path, monkeypatch, no_network):
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # an empty tiktoken cache
    probes = []

    def unreachable(address, timeout=None, *args, **kwargs):
        probes.append((address, timeout))
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", unreachable)
    monkeypatch.setattr("tiktoken.get_encoding", lambda *a, **k: pytest.fail("tiktoken was asked to download"))
    with pytest.raises(DataError) as e:
        load_tokenizer({"tokenizer": "gpt2"}, tmp_path)
    # Fast: one probe of the download host, bounded by its timeout, and no download attempt with its retries.
    assert probes == [((GPT2_URLS[0].split("/")[2], 443), PROBE_TIMEOUT_S)]
    assert PROBE_TIMEOUT_S <= 5
    msg = str(e.value)
    for needle in ("data.tokenizer=gpt2", "come from the network", "unreachable", "TIKTOKEN_CACHE_DIR",
                   "data.tokenizer=byte", "data.tokenizer=bpe"):
        assert needle in msg, needle
