"""What the benchmark tests check of a quick run's record, whichever the benchmark."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ffnbench.bench import cli

MACHINE_KEYS = {"label", "hostname", "accelerator", "cpu", "cpu_count", "torch_threads", "torch", "python",
                "versions"}
HEADER = ["benchmark", "machine", "command", "git", "date", "quick", "settings", "load", "rows"]


@dataclass(frozen=True)
class QuickRun:
    """One benchmark run by `python -m ffnbench.bench --quick --only <name> --device cpu`.

    Args:
        name: the benchmark.
        folder: the <out>/<label>/ folder it wrote to.
        result: the record cli.main returned.
        printed: what it printed.
    """

    name: str
    folder: Path
    result: dict[str, Any]
    printed: str

    def record(self) -> dict[str, Any]:
        """The record as its JSON file holds it."""
        return json.loads((self.folder / f"{self.name}.json").read_text())


def positive_finite(x) -> bool:
    return isinstance(x, int | float) and math.isfinite(x) and x > 0


def check_summary(s, n: int | None = None) -> None:
    """`s` is a timing.quartiles summary of `n` positive measurements (at least one when n is None)."""
    assert set(s) == {"median", "iqr", "q1", "q3", "min", "max", "n"}
    assert positive_finite(s["median"]) and s["iqr"] >= 0 and s["min"] <= s["q1"] <= s["median"] <= s["q3"]
    assert s["n"] == n if n is not None else s["n"] >= 1


def check_record(run: QuickRun) -> dict[str, Any]:
    """What every benchmark's quick run must do: print its block, write the record it returned (and only that file)
    with the common header (machine, command, git revision, settings, load, rows, notes). Returns the record."""
    assert sorted(p.name for p in run.folder.glob("*.json")) == [f"{run.name}.json"]
    data = run.record()
    assert data == json.loads(json.dumps(run.result))
    number, benchmark = cli.find(run.name)
    assert f"## {number}. {benchmark.TITLE}" in run.printed
    assert cli.render(run.name, data) in run.printed  # the terminal shows what the file holds
    assert list(data)[:len(HEADER)] == HEADER
    assert data["benchmark"] == run.name and data["quick"] is True and data["notes"]
    assert set(data["machine"]) >= MACHINE_KEYS
    assert data["machine"]["label"] == "test-cpu" and data["machine"]["accelerator"] == "cpu"
    assert data["machine"]["torch"] == torch.__version__
    argv = f"--quick --only {run.name} --out {run.folder.parent} --label test-cpu --device cpu"
    assert data["command"] == f"python -m ffnbench.bench {argv}"
    assert set(data["git"]) == {"revision", "dirty"}  # the code measured
    assert isinstance(data["settings"], dict) and data["rows"]
    assert set(data["load"]) == {"before", "after", "during"}
    return data
