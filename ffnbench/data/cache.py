"""The verified token cache: one directory per corpus, one subdirectory per tokenizer.

    <source>-<key>/corpus.json                 the corpus: content hash, which documents went to which split
    <source>-<key>/<tokenizer>/train.bin       raw uint16 (or uint32) token ids, read as np.memmap
                              /train.json      its meta: n_tokens, dtype, n_bytes of text, blake2b, created
                              /val.bin, val.json, token_bytes.npy (UTF-8 bytes per id), tokenizer.json (bpe)

<key> is known without reading the corpus (corpus.corpus_key), so a second run is served from memmaps without
importing `datasets`. A split counts as built only once its meta exists; a damaged one is rebuilt.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ffnbench.data.config import DataConfig, data_config
from ffnbench.data.corpus import SPLITS, corpus_key, load_corpus
from ffnbench.data.sources import digest, file_digest
from ffnbench.data.tokenizer import BPE_FILE, load_tokenizer, token_dtype, tokenizer_id, vocab_size_for
from ffnbench.errors import DataError
from ffnbench.fileio import atomic_file, write_json_atomic

SEPARATOR = "\n\n"  # after every document, for every tokenizer, so bits per byte stay comparable
ENCODE_BATCH = 1024  # documents per tokenizer call: enough to keep its threads busy, little memory
TOKEN_BYTES_FILE = "token_bytes.npy"
UNIGRAM_FILE = "unigram.json"  # the training split's unigram loss, computed once per token cache


def corpus_dir(config: DataConfig | Mapping) -> Path:
    """The cache directory of a corpus: <cache_dir>/<source>-<hash of its key>."""
    config = data_config(config)
    return config.cache_root / f"{config.source}-{digest(json.dumps(corpus_key(config), sort_keys=True), 6)}"


def token_dir(config: DataConfig) -> Path:
    """Where the corpus's token files for the config's tokenizer live."""
    return corpus_dir(config) / tokenizer_id(config.as_dict())


def _text_batches(ds: Any) -> Iterator[list[str]]:
    """The documents, each followed by the separator, a batch at a time."""
    for batch in ds.select_columns(["text"]).iter(batch_size=ENCODE_BATCH):
        yield [t + SEPARATOR for t in batch["text"]]


def _tokenizer_hash(tok_dir: Path) -> str | None:
    """Identity of the tokenizer files a token cache was made with (None when they are missing)."""
    lengths = tok_dir / TOKEN_BYTES_FILE
    if not lengths.exists():
        return None
    bpe = tok_dir / BPE_FILE
    return digest(file_digest(lengths) + (file_digest(bpe) if bpe.exists() else ""))


def _tokenize_split(ds: Any, tok: Any, path: Path, dtype: np.dtype) -> dict:
    """Tokenize the documents independently (a batch at a time, on the tokenizer's threads), concatenate them,
    and stream the ids to `path`. Returns the split's meta."""
    hasher = hashlib.blake2b(digest_size=16)
    n_tokens = n_bytes = 0
    with atomic_file(path) as f:
        for texts in _text_batches(ds):
            ids = np.concatenate(tok.encode_batch(texts))
            if ids.size and ids.max() >= tok.vocab_size:  # would wrap around silently in the cast below
                raise DataError(f"{tok.id}: produced id {ids.max()} >= its vocabulary size {tok.vocab_size}")
            chunk = ids.astype(dtype).tobytes()
            f.write(chunk)
            hasher.update(chunk)
            n_tokens += ids.size
            n_bytes += sum(len(t.encode("utf-8")) for t in texts)
    return {"n_tokens": n_tokens, "n_docs": len(ds), "n_bytes": n_bytes, "dtype": dtype.name,
            "blake2b": hasher.hexdigest()}


def _check_split(tok_dir: Path, split: str, tokenizer_hash: str | None, verify: bool) -> tuple[dict | None, str]:
    """(meta, "") for an intact cached split, (None, "") for one never built, (None, problem) for a damaged one.
    `verify` also hashes the whole file (prepare_data does; setup, on every rank, checks sizes only)."""
    bin_path, meta_path = tok_dir / f"{split}.bin", tok_dir / f"{split}.json"
    if not bin_path.exists() and not meta_path.exists():
        return None, ""
    where = f"token cache {bin_path}"
    try:
        meta = json.loads(meta_path.read_text())
        expected = int(meta["n_tokens"]) * np.dtype(meta["dtype"]).itemsize
    except FileNotFoundError:
        return None, f"{where}: its meta {meta_path.name} is missing (an interrupted build?)"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return None, f"{where}: its meta {meta_path.name} is unreadable ({type(e).__name__}: {e})"
    if not bin_path.exists():
        return None, f"{where}: the file is missing"
    if (size := bin_path.stat().st_size) != expected:
        return None, f"{where}: {size:,} bytes where its meta says {expected:,}"
    if meta.get("tokenizer_hash") != tokenizer_hash:
        return None, f"{where}: made with other tokenizer files than those in {tok_dir}"
    if verify and file_digest(bin_path) != meta.get("blake2b"):
        return None, f"{where}: its content does not match the hash in its meta"
    return meta, ""


def cached_metas(tok_dir: Path, verify: bool) -> tuple[dict[str, dict] | None, list[str]]:
    """The metas of both splits if both are intact, else None, with what is wrong with them."""
    tokenizer_hash = _tokenizer_hash(tok_dir)
    checked = {split: _check_split(tok_dir, split, tokenizer_hash, verify) for split in SPLITS}
    problems = [problem for _, problem in checked.values() if problem]
    if any(meta is None for meta, _ in checked.values()):
        return None, problems
    return {split: meta for split, (meta, _) in checked.items()}, problems  # type: ignore[misc]


def _build(config: DataConfig, cdir: Path, tok_dir: Path) -> dict[str, dict]:
    """Read the corpus, get the tokenizer (a BPE is trained on the training split once), write both splits."""
    # The tokenizer first: one that cannot be had (gpt2 offline) fails before the corpus is read. Only a BPE
    # that is not trained yet reads the corpus to get it.
    corpus_once = functools.cache(lambda: load_corpus(config))
    tok_dir.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(config.as_dict(), tok_dir,
                         lambda: (t for texts in _text_batches(corpus_once().splits["train"]) for t in texts))
    corpus = corpus_once()
    write_json_atomic(cdir / "corpus.json", corpus.record)
    with atomic_file(tok_dir / TOKEN_BYTES_FILE) as f:
        np.save(f, tok.token_byte_lengths())
    for split in SPLITS:  # a new .bin must never pair up with an old meta, even if this build dies half-way
        (tok_dir / f"{split}.json").unlink(missing_ok=True)
    dtype = token_dtype(vocab_size_for(config.as_dict()))
    metas = {split: _tokenize_split(corpus.splits[split], tok, tok_dir / f"{split}.bin", dtype) for split in SPLITS}
    common = {"tokenizer": tok.id, "tokenizer_hash": _tokenizer_hash(tok_dir), "created": time.time(),
              "content_hash": corpus.record["content_hash"]}
    for split, meta in metas.items():  # metas last: a split counts as built only once its meta exists
        meta.update(common, split=split)
        write_json_atomic(tok_dir / f"{split}.json", meta)
    return metas


def prepare_corpus(config: DataConfig | Mapping) -> tuple[Path, dict[str, dict], bool]:
    """Make sure the token cache of a data config exists and is intact, building it if not. Returns (its
    directory, the metas of train and val, whether it was served from the cache). A damaged cache is rebuilt
    with a warning. Concurrent runs on the same cache wait for one another."""
    config = data_config(config)
    tok_dir = token_dir(config)
    metas, _ = cached_metas(tok_dir, verify=True)
    if metas is not None:  # the usual case; it takes no lock, so a read-only shared cache works too
        return tok_dir, metas, True
    from filelock import FileLock

    try:
        tok_dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"data.cache_dir={config.cache_dir}: cannot create {tok_dir.parent} ({e})") from None
    with FileLock(str(tok_dir.parent / f".{tok_dir.name}.lock")):
        metas, problems = cached_metas(tok_dir, verify=True)  # again: another process may have built it meanwhile
        for problem in problems:
            warnings.warn(f"{problem}; rebuilding it", stacklevel=3)
        if metas is not None:
            return tok_dir, metas, True
        return tok_dir, _build(config, tok_dir.parent, tok_dir), False


def unigram_loss(counts: Sequence[int]) -> float:
    """The entropy of the token distribution, in nats/token: the loss of the best model that ignores the context.
    A fact of the corpus, so it lives with the corpus's cache (runs.instability compares curves with it)."""
    total = float(sum(counts))
    if total <= 0:
        raise ValueError("no tokens to count")
    return -sum(c / total * math.log(c / total) for c in counts if c)


def train_unigram_loss(tok_dir: Path, tokens: np.ndarray, vocab_size: int, train_meta: Mapping) -> float:
    """The training split's unigram entropy in nats/token (unigram_loss): the loss a model that ignores the context
    reaches, what a plateau stays near. Computed once and kept beside train.bin, keyed by its digest."""
    path = tok_dir / UNIGRAM_FILE
    key = train_meta.get("blake2b") or train_meta.get("content_hash")
    try:
        cached = json.loads(path.read_text())
        if cached.get("train") == key and isinstance(cached.get("unigram_loss"), float):
            return cached["unigram_loss"]
    except (OSError, ValueError, AttributeError):
        pass
    loss = unigram_loss(np.bincount(np.asarray(tokens), minlength=vocab_size).tolist())
    write_json_atomic(path, {"train": key, "unigram_loss": loss})
    return loss
