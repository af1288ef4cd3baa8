"""Performance benchmarks (`make bench`), each printing a table and writing JSON to <out>/<label>/<name>.json:

    python -m ffnbench.bench [--only 1,3] [--quick] [--label NAME] [--out DIR] [--device cpu|cuda|gpu|auto]
                             [--threads N]

BENCHMARKS lists the benchmark modules, in the order they run; a benchmark's number is its place there. Each module
exports its NAME, TITLE, a one-line SUMMARY (the --help text), its SIZES by preset (session.PRESETS), `measure(session)`
(its record) and `tables(record)` (what is printed of it)."""

from __future__ import annotations

import argparse
import platform
import shlex
import sys
import tempfile
import textwrap
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import torch

import ffnbench.bench.alignment as alignment
import ffnbench.bench.mfu as mfu
import ffnbench.bench.overhead as overhead
import ffnbench.bench.parallel as parallel
import ffnbench.bench.startup as startup
import ffnbench.bench.variants as variants
from ffnbench.bench.render import block
from ffnbench.bench.session import BenchSession, preset
from ffnbench.bench.timing import LoadMeter, load_snapshot
from ffnbench.cli import user_errors_exit
from ffnbench.errors import ConfigError
from ffnbench.placement import resolve_accelerator, torch_device
from ffnbench.runs.provenance import git_revision


class Benchmark(Protocol):
    """What a benchmark module exports."""

    NAME: str  # its results file is <NAME>.json; --only takes it
    TITLE: str  # the printed heading, after its number
    SUMMARY: str  # what it measures, for --help
    SIZES: Mapping[str, Any]  # its sizes (a frozen dataclass) by preset: quick, cpu, gpu

    def measure(self, session: BenchSession) -> dict[str, Any]:
        """Its record: settings, load (before and after), rows, notes and anything else it measured."""
        ...

    def tables(self, record: Mapping[str, Any]) -> list[str]:
        """The tables printed of a record."""
        ...


BENCHMARKS: tuple[Benchmark, ...] = (overhead, mfu, variants, alignment, startup, parallel)
DEFAULT_OUT = Path("experiments") / "bench"


def numbered() -> dict[int, Benchmark]:
    """The benchmarks by number (1, 2, ...: their order in BENCHMARKS)."""
    return dict(enumerate(BENCHMARKS, start=1))


def find(name: str) -> tuple[int, Benchmark]:
    """A benchmark's number and module by its name (KeyError for a name BENCHMARKS does not hold)."""
    for number, benchmark in numbered().items():
        if name == benchmark.NAME:
            return number, benchmark
    raise KeyError(f"no benchmark named {name!r}")


def sizes_for(quick: bool, gpu: bool) -> dict[str, Any]:
    """Every benchmark's sizes for a run (BenchSession.sizes): `quick` (seconds, for the tests), or the full ones
    for a GPU or a CPU."""
    return {b.NAME: b.SIZES[preset(quick, gpu)] for b in BENCHMARKS}


def render(name: str, record: Mapping[str, Any]) -> str:
    """The block printed for benchmark `name`: '## <number>. <title>', its table(s), then its notes indented."""
    number, benchmark = find(name)
    return block(f"{number}. {benchmark.TITLE}", benchmark.tables(record), record.get("notes", ()))


def parse_only(text: str | None) -> list[str]:
    """'1,3' or 'overhead,variants' (or a mix) → benchmark names in run order; None → all of them."""
    names = {i: b.NAME for i, b in numbered().items()}
    if not text:
        return list(names.values())
    chosen = set()
    for item in (t.strip() for t in text.split(",") if t.strip()):
        if item.isdigit() and int(item) in names:
            chosen.add(names[int(item)])
        elif item in names.values():
            chosen.add(item)
        else:
            known = ", ".join(f"{i} {n}" for i, n in names.items())
            raise ConfigError(f"--only: unknown benchmark {item!r}; known: {known}")
    return [name for name in names.values() if name in chosen]


def check_label(label: str) -> str:
    if not label or label in (".", "..") or any(c in label for c in "/\\\0") or label.strip() != label:
        raise ConfigError(f"--label: {label!r} cannot name a folder; use letters, digits, '-', '_' or '.'")
    return label


def machine(label: str, accelerator: str) -> dict[str, Any]:
    """The `machine` block of every benchmark file: provenance.machine_record, the label, and the software versions."""
    from ffnbench.runs.provenance import machine_record, versions

    v = versions()
    return {"label": label, **machine_record(accelerator), "torch": v["torch"], "python": v["python"], "versions": v}


def default_cache_dir() -> Path:
    """The user's token cache (data.cache_dir at the defaults), which the benchmarks read and fill."""
    from ffnbench.config.compose import compose

    return Path(str(compose([]).data.cache_dir)).expanduser()


def description() -> str:
    """The --help text: the command, then each benchmark's number, name, summary and file."""
    lines = ["Performance benchmarks (`make bench`), each printing a table and writing JSON to <out>/<label>/:", ""]
    for i, b in numbered().items():
        lines += textwrap.wrap(f"{b.SUMMARY} → {b.NAME}.json", width=116, initial_indent=f"  {i} {b.NAME:<10} ",
                               subsequent_indent=" " * 15, break_on_hyphens=False)
    lines += ["", "The method (warm-up, interleaved repetitions, paired ratios, the GPU's autocast and "
              "synchronisation): docs/benchmarks.md."]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ffnbench.bench", description=description(),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--label", default=None, help="results folder under --out (default: this machine's hostname)")
    p.add_argument("--out", default=str(DEFAULT_OUT), help="where the <label>/ folder goes (default: %(default)s)")
    p.add_argument("--only", default=None, help="a subset, by number or name: 1,3 or overhead,variants")
    p.add_argument("--quick", action="store_true", help="tiny sizes and few repetitions (for the tests)")
    p.add_argument("--device", default="auto", help="cpu, cuda (= gpu) or auto (default: %(default)s)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch's CPU threads (default: torch's own, one per core). Where another job holds cores "
                        "for the whole session, time on the cores left: threads that wait for a busy core stall "
                        "every parallel kernel (recorded as the machine's torch_threads)")
    return p


def _warn_if_busy() -> None:
    snapshot = load_snapshot()
    if snapshot["busy_fraction"] is not None and snapshot["busy_fraction"] > 0.2:
        print(f"ffnbench bench: warning: the machine is busy ({snapshot['busy_fraction']:.0%} of the CPU in use "
              f"by other processes, load {snapshot['loadavg']}): timings will be low and noisy", file=sys.stderr)


def run_benchmarks(session: BenchSession, names: list[str], header: dict[str, Any], out: Path) -> dict[str, dict]:
    """Run benchmarks `names` in `session`: print each one's table and write its record (`header` + what it
    measured + the load meanwhile) to <out>/<name>.json. Returns the records by benchmark name."""
    from ffnbench.fileio import write_json_atomic

    results = {}
    for name in names:
        t0, meter = time.perf_counter(), LoadMeter()
        measured = find(name)[1].measure(session)
        during = meter.read()
        print(render(name, measured), flush=True)
        results[name] = record = {
            "benchmark": name, **header, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "quick": session.quick,
            "settings": measured.pop("settings"), "load": {**measured.pop("load"), "during": during},
            "rows": measured.pop("rows"), **measured}
        write_json_atomic(out / f"{name}.json", record)
        busy = f"; other processes used {during['others_busy_fraction']:.1%} of the CPU" if during else ""
        print(f"  ({name}: {time.perf_counter() - t0:.0f} s{busy} → {out / (name + '.json')})")
    return results


@user_errors_exit
def main(argv: list[str] | None = None) -> dict[str, dict]:
    """Run the chosen benchmarks; print each one's tables and write its record to <out>/<label>/<name>.json.
    Returns the records by benchmark name."""
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    names = parse_only(args.only)
    if args.threads is not None:
        if args.threads < 1:
            raise ConfigError(f"--threads: expected a positive number of threads, got {args.threads}")
        torch.set_num_threads(args.threads)
    accelerator = resolve_accelerator(args.device, field="--device")
    device = torch_device(accelerator)
    label = check_label(args.label or platform.node() or "unknown")
    out = Path(args.out).expanduser() / label
    if device.type == "cuda":
        torch.set_float32_matmul_precision("high")  # as train() does on a GPU (the machine block records it)
    header = {"machine": machine(label, accelerator), "command": shlex.join(["python", "-m", "ffnbench.bench", *argv]),
              "git": git_revision()}  # the code measured: its commit, and whether it had uncommitted changes
    started = time.perf_counter()
    m = header["machine"]
    print(f"ffnbench bench: {', '.join(names)} on {m.get('gpu') or m['cpu']} ({m['cpu_count']} cores, "
          f"{m['torch_threads']} threads, torch {m['torch']}){' [quick]' if args.quick else ''} → {out}")
    _warn_if_busy()
    with tempfile.TemporaryDirectory(prefix="ffnbench-bench-") as work:
        session = BenchSession(device=device, quick=args.quick, sizes=sizes_for(args.quick, device.type == "cuda"),
                               work=Path(work), cache_dir=default_cache_dir())
        results = run_benchmarks(session, names, header, out)
    total = time.perf_counter() - started
    print(f"\nffnbench bench: done in {total:.0f} s ({total / 60:.1f} min); JSON in {out}")
    return results
