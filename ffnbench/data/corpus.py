"""A corpus: the documents of a source, empty ones dropped, cut into train and validation documents, and the key
that identifies them without reading them (the name of their cache directory).

A source with a validation split of its own (`splits.val` in its source file) keeps it; otherwise whole documents
are held out: those with the lowest sha1 of their id, until data.val_fraction of the characters are.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ffnbench.data.config import DataConfig, data_config
from ffnbench.data.documents import DOCUMENT_RULES
from ffnbench.data.sources import LOADERS, digest, fingerprint
from ffnbench.errors import DataError

SPLITS = ("train", "val")
# The fields of a source file that change what the documents are (the loader does not: the source's name and
# fingerprint say which files it reads). Part of every cache directory's name: never reorder or rename them.
CORPUS_KEYS = ("hub_id", "hub_name", "revision", "text_field", "id_field", "splits", "documents", "max_docs")
MAX_RECORDED_IDS = 10_000  # corpus.json lists document ids up to this many per split, then only a hash
INDEX_BATCH = 1024  # documents per batch when indexing


def corpus_key(config: DataConfig | Mapping) -> dict:
    """What identifies the documents and their split, known without reading them."""
    config = data_config(config)
    key: dict[str, Any] = {"source": config.source, **fingerprint(config)}
    key.update({k: getattr(config, k) for k in CORPUS_KEYS if getattr(config, k) is not None})
    if config.holds_out_documents:
        key["val_fraction"] = config.val_fraction
    return key


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
               "ids_hash": digest("".join(sorted(self.id_sha1s)))}
        if self.ids is not None and len(self.ids) <= MAX_RECORDED_IDS:
            out["ids"] = self.ids
        return out


def index_documents(ds: Any) -> DocIndex:
    has_ids = "id" in ds.column_names
    ids: list[str] = []
    n_chars: list[int] = []
    content = hashlib.blake2b(digest_size=16)
    for batch in ds.iter(batch_size=INDEX_BATCH):
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


def _more_documents(config: DataConfig) -> str:
    """How to give a corpus of one document more: what a document is for its loader."""
    if config.loader == "files":
        return ("Each .txt/.md file under data.path is one document (each parquet/jsonl row one): split the text into "
                "several files in one folder and pass data.path=<that folder>, or write a .jsonl file with one "
                '{"text": ...} line per document')
    return "Use more of the corpus (data.max_docs) or a source with several documents"


def load_corpus(config: DataConfig) -> Corpus:
    """Read the documents (through `datasets`), drop empty ones, and split them when the source does not."""
    rule = DOCUMENT_RULES[config.documents or "rows"]
    docs, dropped = {}, 0
    for name, ds in LOADERS[config.loader](config).items():
        ds = rule(ds)
        if config.max_docs is not None and len(ds) > config.max_docs:
            ds = ds.select(range(config.max_docs))
        ds, index, n_empty = _nonempty(ds)
        docs[name], dropped = (ds, index), dropped + n_empty
    content_hash = digest("".join(docs[name][1].content_hash for name in sorted(docs)))
    if not any(len(ds) for ds, _ in docs.values()):
        raise DataError(f"data={config.source}: the corpus is empty (no document has any text)")
    if "val" in docs:
        split_rule, held_out = "the source's own splits", {}
    else:
        split_rule = "lowest sha1(document id) first, until val_fraction of the characters are held out"
        held_out = {"val_fraction": config.val_fraction}
        ds, index = docs["train"]
        if len(index.id_sha1s) < 2:
            raise DataError(f"data={config.source}: the corpus has {len(index.id_sha1s)} document(s); holding out "
                            f"validation documents needs at least 2. {_more_documents(config)}")
        is_val = split_by_hash(index.id_sha1s, index.n_chars, config.val_fraction)
        docs = {name: (ds.select(rows), index.subset(rows))
                for name, rows in (("train", np.flatnonzero(~is_val)), ("val", np.flatnonzero(is_val)))}
    for name in SPLITS:
        if len(docs[name][0]) == 0:
            raise DataError(f"data={config.source}: the {name} split has no document with text")
    record = {"source": config.source, "key": corpus_key(config), "content_hash": content_hash,
              "split_rule": split_rule, "splits": {name: index.record() for name, (_, index) in docs.items()},
              "dropped_empty_docs": dropped, "created": time.time(), **held_out}
    return Corpus({name: ds for name, (ds, _) in docs.items()}, record)
