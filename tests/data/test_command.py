"""The data command (python -m ffnbench.data): it prepares then serves from the cache; a user error is one line
and exit 2."""

import os
import re
import subprocess
import sys

import pytest


def run_data(cache, *args):
    return subprocess.run([sys.executable, "-m", "ffnbench.data", *args], capture_output=True, text=True,
                          env={**os.environ, "FFNBENCH_CACHE": str(cache)}, timeout=120)


def test_data_command_prepares_then_serves_from_the_cache(tmp_path):
    first = run_data(tmp_path, "model=micro")
    assert first.returncode == 0, first.stderr
    for needle in ("shakespeare", "train", "val", "5,038,758", "280,176", "bytes per target token",
                   str(tmp_path), "built in"):
        assert needle in first.stdout, needle
    second = run_data(tmp_path, "model=micro")
    assert second.returncode == 0, second.stderr
    # served, not rebuilt: how fast that is belongs to `make bench` (startup.json), not to a timed test
    assert re.search(r"served from the cache in [\d.]+ s", second.stdout), second.stdout
    assert "built in" not in second.stdout


def test_data_command_user_error_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from ffnbench.__main__ import main

    monkeypatch.setenv("FFNBENCH_CACHE", str(tmp_path))
    for argv in (["data", "data=gutenberg"], ["data", "data.source=gutenberg"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("ffnbench: error:") and err.count("\n") == 1 and "gutenberg" in err, err
