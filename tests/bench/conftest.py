"""Fixtures of the benchmark tests: a quick run of any benchmark (each run once per test session), and a quick
session on the CPU."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable

import pytest
import torch

from ffnbench.bench import cli
from ffnbench.bench.session import BenchSession

from .checks import QuickRun


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory) -> Callable[[str], QuickRun]:
    """run(name): benchmark `name` at --quick sizes on the CPU, into a temporary folder, on a temporary data cache
    (shared by the benchmarks of the session). A benchmark runs once; its test file's tests share the run."""
    root = tmp_path_factory.mktemp("bench")
    runs: dict[str, QuickRun] = {}

    def run(name: str) -> QuickRun:
        if name not in runs:
            mp = pytest.MonkeyPatch()
            mp.setenv("FFNBENCH_CACHE", str(root / "cache"))
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    results = cli.main(["--quick", "--only", name, "--out", str(root / name), "--label", "test-cpu",
                                        "--device", "cpu"])
            finally:
                mp.undo()
            runs[name] = QuickRun(name, root / name / "test-cpu", results[name], out.getvalue())
        return runs[name]

    return run


@pytest.fixture
def quick_session(tmp_path) -> BenchSession:
    """A session at the --quick sizes on the CPU, working in tmp_path (its data cache too)."""
    return BenchSession(device=torch.device("cpu"), quick=True, sizes=cli.sizes_for(True, False), work=tmp_path,
                        cache_dir=tmp_path / "cache")
