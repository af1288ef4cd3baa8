"""File I/O: atomic writes (the old file or the new one, never half of one), NaN as null, reads that name the
problem."""

import errno
import io
import json
import math
import os
import re
from pathlib import Path

import pytest

from ffnbench import fileio
from ffnbench.fileio import (
    CorruptRecord,
    atomic_file,
    full_folder,
    json_safe,
    no_space,
    read_json,
    size_text,
    write_json_atomic,
)

OLD = {"status": "finished", "loss": 1.0}
NEW = {"status": "finished", "loss": 2.0, "curve": list(range(2000))}  # long enough for a write in pieces


def write_with_atomic_file(path, data):
    with atomic_file(path) as f:
        f.write(json.dumps(data).encode())


# Both writers of the one atomic write: the raw one and the JSON one over it.
WRITERS = pytest.mark.parametrize("write", [write_with_atomic_file, write_json_atomic],
                                  ids=["atomic_file", "write_json_atomic"])


@pytest.fixture
def old_file(tmp_path):
    """A record already on disk, and its exact bytes."""
    path = tmp_path / "result.json"
    write_json_atomic(path, OLD)
    return path, path.read_bytes()


def assert_untouched(path, before):
    assert path.read_bytes() == before  # byte for byte
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary file left behind


class DiskFull(io.RawIOBase):
    """A file that takes the first half of what is written to it, then fails as a full disk does."""

    def __init__(self, real):
        self.real = real

    def write(self, data):
        self.real.write(bytes(data[: len(data) // 2]))
        self.real.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def fileno(self):
        return self.real.fileno()

    def close(self):
        self.real.close()
        super().close()


def test_write_is_atomic_and_readable(tmp_path):
    path = tmp_path / "run" / "result.json"
    write_json_atomic(path, {"status": "finished", "loss": 1.5})
    assert json.loads(path.read_text()) == {"status": "finished", "loss": 1.5}
    assert not list(path.parent.glob(".*.tmp"))
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_data_that_is_not_json_fails_before_the_file_is_touched(tmp_path):
    path = tmp_path / "result.json"
    write_json_atomic(path, {"status": "finished"})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"status": object()})  # not JSON
    assert json.loads(path.read_text()) == {"status": "finished"}
    assert not list(tmp_path.glob(".*.tmp"))


@WRITERS
@pytest.mark.parametrize(("call", "error", "message"), [
    ("replace", OSError(errno.EXDEV, "Invalid cross-device link"), "cross-device"),  # the rename
    ("fsync", OSError(errno.EIO, "Input/output error"), "Input/output error"),
])
def test_a_failed_rename_or_fsync_leaves_the_old_file(old_file, monkeypatch, write, call, error, message):
    path, before = old_file

    def fails(*args):
        raise error

    monkeypatch.setattr(os, call, fails)
    with pytest.raises(OSError, match=message):
        write(path, NEW)
    assert_untouched(path, before)


@WRITERS
def test_a_write_failing_halfway_leaves_the_old_file(old_file, monkeypatch, write):
    path, before = old_file
    fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, *args, **kwargs: DiskFull(fdopen(fd, *args, **kwargs)))
    with pytest.raises(OSError, match="No space left"):
        write(path, NEW)
    assert_untouched(path, before)


def test_an_error_inside_the_block_leaves_the_old_file(old_file):
    path, before = old_file
    with pytest.raises(KeyboardInterrupt), atomic_file(path) as f:
        f.write(b'{"status": "fin')
        raise KeyboardInterrupt  # Ctrl-C halfway through
    assert_untouched(path, before)


def test_readers_see_the_old_file_until_the_new_one_is_complete(old_file):
    path, before = old_file
    with atomic_file(path) as f:
        f.write(json.dumps(NEW).encode())
        f.flush()
        assert path.read_bytes() == before  # a writer in place would show the new half here
    assert json.loads(path.read_bytes()) == NEW


def test_the_json_writer_renames_a_complete_file_over_the_old_one(old_file, monkeypatch):
    path, before = old_file
    seen = []
    replace = os.replace

    def watch(src, dst):
        seen.append((json.loads(Path(src).read_bytes()), Path(dst).read_bytes()))
        replace(src, dst)

    monkeypatch.setattr(os, "replace", watch)
    write_json_atomic(path, NEW)
    assert seen == [(NEW, before)]  # one rename: the whole new record over the untouched old one
    assert json.loads(path.read_text()) == NEW and sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_non_finite_numbers_become_null():
    assert json_safe({"a": [math.nan, math.inf, 1.0]}) == {"a": [None, None, 1.0]}


@pytest.mark.parametrize(("content", "message"), [("{not json", r"unreadable \(JSONDecodeError"),
                                                  (b"\xff\xfe", r"unreadable \(UnicodeDecodeError"),
                                                  ("[1, 2]", "expected a JSON object, found list")])
def test_unreadable_records_name_the_file_and_the_problem(tmp_path, content, message):
    path = tmp_path / "result.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(CorruptRecord, match=f"^{re.escape(str(path))}: {message}"):
        read_json(path)
    # (A record's own checks, its status and schema, are RunResult's: tests/runs/test_result.py.)


def test_a_full_disk_is_found_in_the_chain_of_errors_it_caused_and_a_quota_counts_as_one():
    full = OSError(errno.ENOSPC, "No space left on device")
    assert no_space(full) is full
    try:  # an error raised while the full disk's was handled (a logger's save in Lightning's clean-up)
        try:
            raise full
        except OSError:
            raise RuntimeError("finalize failed") from None
    except RuntimeError as chained:
        assert no_space(chained) is full
    wrapped = RuntimeError("checkpoint failed")
    wrapped.__cause__ = full
    assert no_space(wrapped) is full and no_space(RuntimeError("checkpoint failed")) is None
    quota = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert no_space(quota) is quota
    assert no_space(OSError(errno.EIO, "Input/output error")) is None and no_space(None) is None


def test_the_full_folder_is_the_one_of_the_error_with_the_least_space(tmp_path, monkeypatch):
    (tmp_path / "tmp").mkdir()
    (tmp_path / "run").mkdir()
    free = {tmp_path / "tmp": 10**9, tmp_path / "run": 1000, tmp_path: 10**9}
    monkeypatch.setattr(fileio, "free_bytes", lambda p: free[Path(p)])
    # a copy from the system's temporary folder into the run's: its target's disk is the full one
    copy = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "tmp" / "x"), None,
                   str(tmp_path / "run" / "last.ckpt.tmp"))
    assert full_folder(copy, tmp_path) == tmp_path / "run"
    assert full_folder(OSError(errno.ENOSPC, "No space left on device"), tmp_path / "run") == tmp_path / "run"


def test_sizes_are_written_for_a_reader():
    assert [size_text(n) for n in (512, 3_121_152, 10_079_232, 2.5e9)] == ["512 B", "3.1 MB", "10.1 MB", "2.5 GB"]
