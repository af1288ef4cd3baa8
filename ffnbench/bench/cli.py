"""Performance benchmarks (`make bench`), each printing a table and writing JSON to <out>/<label>/:

    python -m ffnbench.bench [--only 1,3] [--quick] [--label NAME] [--out DIR] [--device cpu|cuda|gpu|auto]
                             [--threads N]

  1 overhead   tokens/s of the real pipeline (train(): Lightning, logging, callbacks) ÷ tokens/s of a minimal
               hand-written PyTorch loop over the same model, batches, AdamW and clipping     → overhead.json
  2 mfu        achieved model FLOP/s ÷ peak FLOP/s (CPU: the fp32 GEMM probe of throughput.py, measured here;
               GPU: the datasheet dense peak), tiny and small models                             → mfu.json
  3 variants   every FFN variant at matched budget: one FFN layer forward+backward, and a whole training
               step, eager and compiled                                                          → variants.json
  4 alignment  one SwiGLU layer at d_ff = 682 / 704 / 768 (multiple of 1 / 64 / 256): time and time per
               parameter (claim C9)                                                              → alignment.json
  5 startup    command start → first training step of `python -m ffnbench.train` (a subprocess), and data
               preparation: first tokenization vs cached load                                    → startup.json
  6 parallel   CPU: one run on every core against several runs at once on a share each (the joblib launcher):
               tokens/s and runs per hour as ratios against the run alone                         → parallel.json

Method: warm-up steps and calls are excluded; repetitions are interleaved (A B, B A, A B, ...) so slow drift of
the machine hits every contender alike; every figure is the median of its repetitions with the interquartile
range (IQR) and the count; ratios are taken per repetition between measurements made side by side. On a GPU
timed regions are bracketed by torch.cuda.synchronize(), models run compiled under the autocast trainer=gpu uses
there (bf16, or fp16 before Ampere)."""

from __future__ import annotations

import argparse
import platform
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ffnbench.bench import alignment, mfu, overhead, parallel, startup, variants
from ffnbench.bench.render import render
from ffnbench.bench.session import BenchSession, sizes_for
from ffnbench.bench.timing import LoadMeter, load_snapshot
from ffnbench.cli import user_errors_exit
from ffnbench.errors import ConfigError
from ffnbench.hardware import resolve_accelerator, torch_device
from ffnbench.records import git_revision

BENCHMARKS = {1: "overhead", 2: "mfu", 3: "variants", 4: "alignment", 5: "startup", 6: "parallel"}
MEASURE: dict[str, Callable[[BenchSession], dict[str, Any]]] = {
    "overhead": overhead.measure, "mfu": mfu.measure, "variants": variants.measure, "alignment": alignment.measure,
    "startup": startup.measure, "parallel": parallel.measure}
DEFAULT_OUT = Path("experiments") / "bench"


def parse_only(text: str | None) -> list[str]:
    """'1,3' or 'overhead,variants' (or a mix) → benchmark names in run order; None → all of them."""
    if not text:
        return list(BENCHMARKS.values())
    chosen = set()
    for item in (t.strip() for t in text.split(",") if t.strip()):
        if item.isdigit() and int(item) in BENCHMARKS:
            chosen.add(BENCHMARKS[int(item)])
        elif item in BENCHMARKS.values():
            chosen.add(item)
        else:
            known = ", ".join(f"{i} {n}" for i, n in BENCHMARKS.items())
            raise ConfigError(f"--only: unknown benchmark {item!r}; known: {known}")
    return [name for name in BENCHMARKS.values() if name in chosen]


def check_label(label: str) -> str:
    if not label or label in (".", "..") or any(c in label for c in "/\\\0") or label.strip() != label:
        raise ConfigError(f"--label: {label!r} cannot name a folder; use letters, digits, '-', '_' or '.'")
    return label


def machine(label: str, accelerator: str) -> dict[str, Any]:
    """The `machine` block of every benchmark file: records.hardware, the label, and the software versions."""
    from ffnbench.records import hardware, versions

    v = versions()
    return {"label": label, **hardware(accelerator), "torch": v["torch"], "python": v["python"], "versions": v}


def _default_cache_dir() -> Path:
    from ffnbench.config.compose import compose

    return Path(str(compose([]).data.cache_dir)).expanduser()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ffnbench.bench", description=__doc__,
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
    from ffnbench.records import write_json_atomic

    results = {}
    for name in names:
        t0, meter = time.perf_counter(), LoadMeter()
        measured = MEASURE[name](session)
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
                               work=Path(work), cache_dir=_default_cache_dir())
        results = run_benchmarks(session, names, header, out)
    total = time.perf_counter() - started
    print(f"\nffnbench bench: done in {total:.0f} s ({total / 60:.1f} min); JSON in {out}")
    return results
