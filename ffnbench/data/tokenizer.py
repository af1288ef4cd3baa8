"""Tokenizers: byte (default, 256 symbols, no download), bpe (a byte-level BPE trained with `tokenizers` on the
training split), gpt2 (tiktoken's GPT-2 BPE, whose files come from the network).

All three are lossless on UTF-8 text and know the exact byte length of every token id
(`token_byte_lengths`), which is what turns a loss per token into bits per byte."""

from __future__ import annotations

import hashlib
import math
import os
import socket
import tempfile
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ffnbench.errors import ConfigError, DataError
from ffnbench.fileio import atomic_file

TOKENIZERS = ("byte", "bpe", "gpt2")
GPT2_VOCAB_SIZE = 50257
BPE_FILE = "tokenizer.json"  # a trained BPE, kept next to the token cache it produced

# tiktoken downloads these two files for "gpt2" and caches each under the sha1 of its URL.
GPT2_URLS = (
    "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/vocab.bpe",
    "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/encoder.json",
)
PROBE_TIMEOUT_S = 3.0


def bits_per_byte(loss_nats: Any, bytes_per_token: float) -> Any:
    """Cross-entropy in nats per token -> bits per UTF-8 byte, comparable across tokenizers."""
    return loss_nats / (math.log(2) * bytes_per_token)


def vocab_size_for(data_cfg: Mapping) -> int:
    """The vocabulary size a data config implies, known without reading any data (the model's embedding
    size: a trained BPE may come out smaller, its ids are then simply < this)."""
    name = data_cfg.get("tokenizer", "byte")
    if name == "byte":
        return 256
    if name == "bpe":
        size = data_cfg.get("vocab_size")
        if not isinstance(size, int) or isinstance(size, bool) or not 256 <= size <= 2**32:
            raise ConfigError(f"data.vocab_size: a byte-level BPE needs an integer vocabulary of at least 256 "
                              f"(its byte alphabet), got {size!r}")
        return size
    if name == "gpt2":
        return GPT2_VOCAB_SIZE
    raise ConfigError(f"data.tokenizer: unknown tokenizer {name!r}; known tokenizers: {', '.join(TOKENIZERS)}")


def tokenizer_id(data_cfg: Mapping) -> str:
    """The name of a tokenizer in cache paths: `byte`, `bpe4096`, `gpt2`."""
    name = data_cfg.get("tokenizer", "byte")
    size = vocab_size_for(data_cfg)  # validates the name
    return f"bpe{size}" if name == "bpe" else name


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype that holds every id."""
    return np.dtype(np.uint16 if vocab_size <= 2**16 else np.uint32)


class Tokenizer(Protocol):
    id: str
    vocab_size: int

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]: ...

    def decode(self, ids: Iterable[int]) -> str: ...

    def token_byte_lengths(self) -> np.ndarray: ...


class ByteTokenizer:
    """UTF-8 bytes: id = byte value."""

    id = "byte"
    vocab_size = 256

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [np.frombuffer(t.encode("utf-8"), dtype=np.uint8) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(np.asarray(ids, dtype=np.uint8)).decode("utf-8", errors="replace")

    def token_byte_lengths(self) -> np.ndarray:
        return np.ones(256, dtype=np.int64)


class BPETokenizer:
    """A byte-level BPE (GPT-2's pre-tokenizer and byte alphabet) from the `tokenizers` library. Its batch
    encoding runs on Rust threads (RAYON_NUM_THREADS)."""

    def __init__(self, tok: Any, vocab_size: int):
        self._tok = tok
        self.vocab_size = vocab_size
        self.id = f"bpe{vocab_size}"
        if tok.get_vocab_size(with_added_tokens=True) > vocab_size:
            raise DataError(f"{self.id}: the BPE has {tok.get_vocab_size(with_added_tokens=True)} tokens, more than "
                            f"data.vocab_size={vocab_size}; delete its {BPE_FILE} to retrain it")

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> BPETokenizer:
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        tok = HFTokenizer(models.BPE())
        # No prefix space and no special tokens: decoding gives back exactly the bytes that went in.
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      special_tokens=[], show_progress=False)
        tok.train_from_iterator(texts, trainer)
        return cls(tok, vocab_size)

    @classmethod
    def load(cls, path: Path, vocab_size: int) -> BPETokenizer:
        from tokenizers import Tokenizer as HFTokenizer

        return cls(HFTokenizer.from_file(str(path)), vocab_size)

    def save(self, path: Path) -> None:
        with atomic_file(path) as f:
            f.write(self._tok.to_str().encode())

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        encode = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)  # _fast skips the offsets
        return [np.asarray(e.ids, dtype=np.int64) for e in encode(list(texts))]

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode([int(i) for i in ids])

    def token_byte_lengths(self) -> np.ndarray:
        # Byte-level tokens are spelled in a 256-character alphabet, one character per byte.
        lengths = np.zeros(self.vocab_size, dtype=np.int64)
        special = {t.content for t in self._tok.get_added_tokens_decoder().values()}
        for token, i in self._tok.get_vocab(with_added_tokens=True).items():
            lengths[i] = 0 if token in special else len(token)
        return lengths


class TiktokenTokenizer:
    """A tiktoken encoding (GPT-2's for data.tokenizer=gpt2), ordinary text only: no special tokens."""

    def __init__(self, encoding: Any, id: str, num_threads: int):
        self._enc = encoding
        self.id = id
        self.vocab_size = encoding.n_vocab
        self._threads = num_threads

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        batch = self._enc.encode_ordinary_batch(list(texts), num_threads=self._threads)
        return [np.asarray(ids, dtype=np.int64) for ids in batch]

    def decode(self, ids: Iterable[int]) -> str:
        return self._enc.decode([int(i) for i in ids])

    def token_byte_lengths(self) -> np.ndarray:
        lengths = np.zeros(self.vocab_size, dtype=np.int64)
        special = self._enc.special_tokens_set
        for i in range(self.vocab_size):
            try:
                token = self._enc.decode_single_token_bytes(i)
            except KeyError:  # an id the encoding leaves unused
                continue
            lengths[i] = 0 if token.decode("utf-8", "replace") in special else len(token)
        return lengths


def num_threads(data_cfg: Mapping) -> int:
    n = data_cfg.get("num_proc")
    if n is None:
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ConfigError(f"data.num_proc: expected a positive integer or null (all cores), got {n!r}")
    return n


def load_tokenizer(data_cfg: Mapping, directory: Path,
                   training_texts: Callable[[], Iterable[str]] | None = None) -> Tokenizer:
    """The tokenizer of a data config. A BPE is read from `directory`/tokenizer.json, or trained on
    `training_texts()` (the training split only) and saved there when that file is missing or unreadable."""
    name = data_cfg.get("tokenizer", "byte")
    vocab_size = vocab_size_for(data_cfg)
    threads = num_threads(data_cfg)
    if name == "byte":
        return ByteTokenizer()
    if name == "gpt2":
        return _load_gpt2(threads)
    if data_cfg.get("num_proc") is not None:
        # The Rust thread pool reads this once, when it starts (the first encode in this process).
        os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
    path = directory / BPE_FILE
    if path.exists():
        try:
            return BPETokenizer.load(path, vocab_size)
        except Exception as e:  # a truncated or foreign file: retrain rather than fail
            warnings.warn(f"{path}: unreadable BPE tokenizer ({type(e).__name__}: {e}); retraining it",
                          stacklevel=2)
    if training_texts is None:
        raise DataError(f"{path}: no trained BPE tokenizer here and no training text to train one")
    tok = BPETokenizer.train(training_texts(), vocab_size)
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(path)
    return tok


def tiktoken_cache_dir() -> str:
    """Where tiktoken looks for its downloaded files (same rule as tiktoken.load.read_file_cached)."""
    for var in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        if var in os.environ:
            return os.environ[var]
    return os.path.join(tempfile.gettempdir(), "data-gym-cache")


def _gpt2_cache_names() -> list[str]:
    return [hashlib.sha1(url.encode()).hexdigest() for url in GPT2_URLS]


def unreachable(host: str, port: int = 443) -> str | None:
    """Why `host` cannot be reached (None if it can): a quick probe, so an offline machine fails in seconds
    instead of sitting through a library's download retries."""
    try:
        socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S).close()
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    return None


def _load_gpt2(threads: int) -> TiktokenTokenizer:
    """tiktoken's GPT-2 encoding. Without its files in the cache and without a network, fail at once with the
    fix instead of letting tiktoken's download hang or retry."""
    cache = tiktoken_cache_dir()
    cached = bool(cache) and all(os.path.exists(os.path.join(cache, n)) for n in _gpt2_cache_names())
    host = GPT2_URLS[0].split("/")[2]
    if not cached and (why := unreachable(host)):
        raise DataError(_gpt2_fix(f"{host} is unreachable ({why})"))
    try:
        import tiktoken

        encoding = tiktoken.get_encoding("gpt2")
    except Exception as e:
        raise DataError(_gpt2_fix(f"loading it failed ({type(e).__name__}: {e})")) from None
    return TiktokenTokenizer(encoding, "gpt2", threads)


def _gpt2_fix(problem: str) -> str:
    names = ", ".join(_gpt2_cache_names())
    return (f"data.tokenizer=gpt2: tiktoken's GPT-2 BPE files (vocab.bpe, encoder.json) come from the network, "
            f"and {problem}. Either copy them into a folder under the names tiktoken caches them by ({names}) "
            f"and set TIKTOKEN_CACHE_DIR=<folder>, or use data.tokenizer=byte or data.tokenizer=bpe (trained here, "
            f"no download).")
