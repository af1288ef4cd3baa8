"""How ffnbench writes and reads its files: atomically (a reader, or a crash, sees the old file or the new one,
never half of one), JSON with NaN/inf as null, JSON reads that say what is wrong with a file they cannot use, and a
full disk told in one line (where, how much is free, how much is needed). Records, caches, benchmark results and the
loggers' files are all written through here."""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO


def json_safe(value: Any) -> Any:
    """NaN/inf are not JSON: a diverged loss is recorded as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


@contextlib.contextmanager
def atomic_file(path: Path, durable: bool = True) -> Iterator[BinaryIO]:
    """Open `path` for writing (binary) through a temporary file in the same directory that is fsynced and
    renamed over the target only when the block completes: a reader (or a crash) sees the old file or the new
    one, never half of one. `durable=False` skips the fsync: still atomic for readers and for a process that dies
    (the kernel holds the data), not against a power cut — for files rewritten every few steps, where an fsync on a
    network filesystem costs milliseconds each time (the checkpoints write them durably)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes it private; records and caches are meant to be shared
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)  # gone already once renamed


def write_json_atomic(path: Path, data: dict, durable: bool = True) -> None:
    """`data` as indented JSON (NaN/inf as null), written with `atomic_file`."""
    text = json.dumps(json_safe(data), indent=2, allow_nan=False) + "\n"
    with atomic_file(path, durable) as f:
        f.write(text.encode())


class CorruptRecord(Exception):
    """A record file that exists but cannot be read as a record."""


def read_json(path: Path) -> dict:
    """The JSON object in `path`; CorruptRecord, naming the file and the problem, when it cannot be read as one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptRecord(f"{path}: unreadable ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict):
        raise CorruptRecord(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


# "No space left on device", and a user's disk quota exceeded (clusters' home and project folders): the same fix
NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def no_space(error: BaseException | None) -> OSError | None:
    """The OSError of a full disk (NO_SPACE) that `error` is or was raised from (its cause or context, as a write that
    failed inside another's clean-up chains them), or None."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in NO_SPACE:
            return error
        error = error.__cause__ or error.__context__
    return None


def free_bytes(path: Path) -> int:
    """The bytes free to this user on the filesystem that holds `path` (its nearest existing folder)."""
    path = Path(path).absolute()
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("/"))
    return shutil.disk_usage(existing).free


def full_folder(error: OSError, fallback: Path) -> Path:
    """The folder whose disk `error` found full: of the files it names (a copy names its source and its target) and
    `fallback`, the folder with the least space free."""
    named = [Path(os.fsdecode(f)).parent for f in (error.filename2, error.filename) if isinstance(f, str | bytes)]
    return min([*named, Path(fallback)], key=free_bytes)


def size_text(n: float) -> str:
    """Bytes for a reader: 512 B, 3.1 MB, 1.2 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


class DiskFull(Exception):
    """A write found its disk full; the message is the one line that says where, what is free and what is needed."""
