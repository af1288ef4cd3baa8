"""`make gpu-check` (`python -m ffnbench.bench.gpucheck`): a GPU machine checked end to end in one script, sized
for at most about 8 minutes on one GPU, its findings written to experiments/bench/<gpu>/gpucheck.json (next to the
overhead, mfu and alignment records that `make bench` writes there too):

  1 software   torch, CUDA, the NVIDIA driver, cuDNN, Triton, the GPUs, their compute capability, the precision
  2 training   `small` and `base` for a few hundred steps each under trainer=gpu (mixed precision, every block
               compiled), and the GPU sweeps' own shape (`small` with an 8192-token BPE vocabulary: the head and
               loss weigh), through ffnbench.train.train() as a user's run; fails if a block ran eager (a graph
               break, a frame dynamo gave up on) or was recompiled after warm-up (dynamo's counters); MFU against the
               datasheet dense peak (throughput.GPU_PEAK_FLOPS), causal attention counted as computed
  3 overhead   the pipeline ÷ hand-loop ratio (bench/overhead.py) and MFU of both (bench/mfu.py), on the GPU
  4 alignment  claim C9's benchmark (bench/alignment.py), on the GPU
  5 ddp        with two GPUs visible: a 2-process DDP run (trainer=ddp trainer.devices=2, compiled)

Exit status 0 when every check passed, 1 when one failed; without a GPU, 2 and one line that says why none is
visible (a CPU-only torch, a driver older than the wheel's CUDA, hidden GPUs)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import ffnbench.bench.alignment as alignment
import ffnbench.bench.mfu as mfu
import ffnbench.bench.overhead as overhead
from ffnbench.bench.cli import DEFAULT_OUT, default_cache_dir, machine, run_benchmarks, sizes_for
from ffnbench.bench.session import BenchSession
from ffnbench.cli import user_errors_exit
from ffnbench.config.schema import TrainerConfig
from ffnbench.errors import ConfigError
from ffnbench.placement import nvidia_driver_version, resolve_device_setup, resolve_precision, why_no_cuda
from ffnbench.runs.provenance import git_revision

TIME_BUDGET_S = 480  # what the sizes below aim at on one datacenter GPU; the record says what it took
TRAIN_MODELS = ("small", "base")
SWEEP_EXPERIMENT = "activations"  # a GPU claim experiment: what its runs train is what gpu-check times


def sweep_shape(experiment: str = SWEEP_EXPERIMENT) -> tuple[str, list[str]]:
    """The shape the GPU sweeps train, read from the composed experiment (conf/experiment/_gpu.yaml): its model, its
    tokenizer and vocabulary (where the tied head and the loss are a large share of a step) and its batch size; on
    Shakespeare, which needs no download, its BPE trained offline."""
    from ffnbench.config.compose import compose

    cfg = compose([f"experiment={experiment}"])
    return str(cfg.model.name), [f"data.tokenizer={cfg.data.tokenizer}", f"data.vocab_size={cfg.data.vocab_size}",
                                 f"data.batch_size={cfg.data.batch_size}"]
TRAIN_STEPS, WARMUP_STEPS = 300, 20  # per model; recompiles are counted after the warm-up steps
DDP_STEPS = 100


def check_sizes(quick: bool) -> dict[str, Any]:
    """The benchmarks' sizes here (BenchSession.sizes): `make bench`'s GPU sizes cut to fit the time budget
    (`quick`: a smoke run)."""
    if quick:
        return sizes_for(True, True)
    full = sizes_for(False, True)
    o, m, a = full[overhead.NAME], full[mfu.NAME], full[alignment.NAME]
    return {**full,
            overhead.NAME: dataclasses.replace(o, models=("small",), steps={**o.steps, "small": (20, 50, 12)}, reps=3),
            mfu.NAME: dataclasses.replace(m, models=(("small", 32), ("base", 8)),
                                          steps={"small": (20, 100), "base": (10, 40)}, reps=2),
            alignment.NAME: dataclasses.replace(a, reps=9)}


# ---- dynamo's counters: did every block run compiled, and compile only in warm-up? ----------------------------


def dynamo_snapshot() -> dict[str, Any]:
    """What torch._dynamo has counted so far in this process (the counters only grow; compare two snapshots)."""
    from torch._dynamo.utils import counters

    return {"graphs": counters["stats"]["unique_graphs"], "frames": counters["frames"]["total"],
            "frames_ok": counters["frames"]["ok"], "graph_breaks": dict(counters["graph_break"]),
            "unimplemented": dict(counters["unimplemented"])}


def compile_problems(start: dict[str, Any], warm: dict[str, Any], end: dict[str, Any]) -> list[str]:
    """What went wrong with compilation between three dynamo snapshots (dynamo_snapshot): the run's start, the end of
    its warm-up, its end. Empty when every compiled frame ran as a graph and nothing was compiled after warm-up.

    - nothing compiled at all: compile was asked for, so the blocks ran eager;
    - a graph break: part of a block ran eager between graphs;
    - a frame dynamo gave up on (an error, or the recompile limit hit): that frame ran eager from then on;
    - a graph compiled after warm-up: a recompile in the timed steps (its cost is in the measured throughput).
    """
    problems = []
    if end["graphs"] == start["graphs"]:
        problems.append("nothing was compiled: every block ran eager")
    breaks = {k: v - start["graph_breaks"].get(k, 0) for k, v in end["graph_breaks"].items()}
    breaks = {k: v for k, v in breaks.items() if v > 0}
    if breaks:
        problems.append(f"{sum(breaks.values())} graph break(s), part of a block ran eager: "
                        + "; ".join(f"{k[:120]} (×{v})" for k, v in breaks.items()))
    failed = (end["frames"] - start["frames"]) - (end["frames_ok"] - start["frames_ok"])
    if failed > 0:
        why = {k: v - start["unimplemented"].get(k, 0) for k, v in end["unimplemented"].items()}
        why_text = "; ".join(k[:120] for k, v in why.items() if v > 0)
        problems.append(f"{failed} frame(s) dynamo gave up on ran eager" + (f": {why_text}" if why_text else ""))
    late = end["graphs"] - warm["graphs"]
    if late > 0:
        problems.append(f"{late} graph(s) compiled after warm-up (a recompile in the timed steps)")
    return problems


def dynamo_watch(warmup_steps: int):
    """A Lightning callback that snapshots dynamo's counters at the start of fit, after `warmup_steps` optimizer
    steps and at the end of fit (validation after it excluded); `problems()` judges them."""
    import lightning as L

    class DynamoWatch(L.Callback):
        def __init__(self) -> None:
            self.snapshots: dict[str, dict[str, Any]] = {}

        def on_train_start(self, trainer, pl_module) -> None:
            self.snapshots["start"] = dynamo_snapshot()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if trainer.global_step >= warmup_steps and "warm" not in self.snapshots:  # at a batch's end
                self.snapshots["warm"] = dynamo_snapshot()

        def on_train_end(self, trainer, pl_module) -> None:
            self.snapshots["end"] = dynamo_snapshot()
            self.snapshots.setdefault("warm", self.snapshots["end"])  # a run shorter than its warm-up

        def problems(self) -> list[str]:
            if set(self.snapshots) != {"start", "warm", "end"}:
                return ["the run did not train (no snapshot of dynamo's counters)"]
            return compile_problems(self.snapshots["start"], self.snapshots["warm"], self.snapshots["end"])

    return DynamoWatch()


# ---- the checks -------------------------------------------------------------------------------------------------


def gpu_label(device_name: str) -> str:
    """The results folder of a GPU model: "NVIDIA H200 NVL" → nvidia-h200-nvl."""
    return "-".join(re.findall(r"[a-z0-9]+", device_name.lower())) or "gpu"


def software() -> dict[str, Any]:
    """torch, CUDA, driver, cuDNN, Triton and the GPUs, as the records keep them."""
    from ffnbench.runs.provenance import versions

    gpus = [{"index": i, "name": torch.cuda.get_device_name(i),
             "capability": ".".join(map(str, torch.cuda.get_device_capability(i))),
             "memory_gib": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1)}
            for i in range(torch.cuda.device_count())]
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "driver": nvidia_driver_version(),
            "cudnn": torch.backends.cudnn.version(), "triton": versions().get("triton"),
            "arch_list": torch.cuda.get_arch_list(), "precision": resolve_precision("gpu", "auto"), "gpus": gpus}


def train_check(session: BenchSession, model: str, steps: int, warmup: int,
                extra: list[str] | None = None) -> dict[str, Any]:
    """One compiled training run of `model` as trainer=gpu trains it (a fresh dynamo, as a fresh process has), watched
    by dynamo_watch: its status, tokens/s, MFU against the datasheet peak, and what went wrong with compilation."""
    from ffnbench.bench.contenders import pipeline_overrides
    from ffnbench.config.compose import compose
    from ffnbench.train import train

    torch._dynamo.reset()
    watch = dynamo_watch(warmup)
    run_dir = session.work / "train" / model
    cfg = compose([*pipeline_overrides(session, model), "trainer.compile=true", f"trainer.max_steps={steps}",
                   "trainer.progress_bar=false", f"run_dir={run_dir}", *(extra or [])])
    started = time.perf_counter()
    result = train(cfg, callbacks=[watch])
    thr = result.throughput or {}
    problems = watch.problems()
    if result.status != "finished":
        problems.insert(0, f"the run ended {result.status}: {result.error}")
    return {"model": model, "overrides": list(extra or []), "steps": steps, "warmup_steps": warmup,
            "status": result.status,
            "precision": result.hardware.get("precision"), "tokens_per_step": result.tokens_per_step,
            "tokens_per_s": thr.get("tokens_per_s"), "mfu": thr.get("mfu"), "peak_flops": thr.get("peak_flops"),
            "peak_source": thr.get("peak_source"), "final_val_loss": result.metric("final_val_loss"),
            "dynamo": watch.snapshots.get("end"), "problems": problems, "seconds": time.perf_counter() - started}


def ddp_check(session: BenchSession, steps: int) -> dict[str, Any]:
    """A 2-process DDP run of `small`, compiled, as `python -m ffnbench.train trainer=ddp trainer.devices=2`."""
    run_dir = session.work / "ddp"
    command = [sys.executable, "-m", "ffnbench.train", "model=small", "trainer=ddp", "trainer.devices=2",
               "trainer.compile=true", f"trainer.max_steps={steps}", "trainer.val_every=1000000",
               "trainer.ckpt_every=1000000", "trainer.progress_bar=false", "logger=csv",
               f"data.val_tokens={session.val_tokens}", f"data.final_val_tokens={session.val_tokens}",
               f"data.cache_dir={session.cache_dir}", f"run_dir={run_dir}"]
    started = time.perf_counter()
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=300)
        returncode, tail = out.returncode, (out.stdout + out.stderr)[-2000:]
    except subprocess.TimeoutExpired:
        returncode, tail = None, "timed out after 300 s"
    result = json.loads((run_dir / "result.json").read_text()) if (run_dir / "result.json").exists() else {}
    return {"command": shlex.join(command[1:]), "returncode": returncode, "status": result.get("status"),
            "devices": (result.get("hardware") or {}).get("devices"),
            "world_size": (result.get("hardware") or {}).get("world_size"),
            "tokens_per_s": (result.get("throughput") or {}).get("tokens_per_s"),
            "problems": ddp_problems(returncode, result, tail, asked=2), "seconds": time.perf_counter() - started}


def ddp_problems(returncode: int | None, result: dict, tail: str, asked: int) -> list[str]:
    """What is wrong with a DDP check's run: it failed, or fewer processes trained than it asked for (the world size
    its record read off the process group, not the device count it was configured with)."""
    if returncode != 0 or result.get("status") != "finished":
        return [f"the DDP run failed (exit {returncode}): {tail}"]
    world = (result.get("hardware") or {}).get("world_size")
    if world != asked:
        return [f"the DDP run trained on {world} process(es), asked for {asked} (its result.json's "
                "hardware.world_size)"]
    return []


def summarize(benchmarks: dict[str, dict]) -> dict[str, Any]:
    """The figures gpucheck.json quotes from the benchmark records (the records themselves sit next to it)."""
    out: dict[str, Any] = {}
    if "overhead" in benchmarks:
        out["overhead"] = [{"model": r["model"], "ratio": r["ratio"]["median"], "ratio_iqr": r["ratio"]["iqr"],
                            "pipeline_tokens_per_s": r["pipeline_tokens_per_s"]["median"],
                            "hand_tokens_per_s": r["hand_tokens_per_s"]["median"]}
                           for r in benchmarks["overhead"]["rows"]]
    if "mfu" in benchmarks:
        out["mfu"] = [{"model": r["model"], "pipeline_mfu": (r["pipeline_mfu"] or {}).get("median"),
                       "hand_mfu": (r["hand_mfu"] or {}).get("median"), "peak_flops": r["peak_flops"]}
                      for r in benchmarks["mfu"]["rows"]]
    if "alignment" in benchmarks:
        out["alignment"] = [{"d_ff": r["d_ff"], "ms": r["ms_median"], "ns_per_param": r["ns_per_param"]}
                            for r in benchmarks["alignment"]["rows"]]
    return out


def write_record(out_dir: Path, record: dict[str, Any]) -> Path:
    """gpucheck.json in `out_dir` (atomic, NaN as null)."""
    from ffnbench.fileio import write_json_atomic

    path = Path(out_dir) / "gpucheck.json"
    write_json_atomic(path, record)
    return path


def require_gpu() -> None:
    """A ConfigError (one line, exit 2) when CUDA sees no GPU here, saying why."""
    if not torch.cuda.is_available():
        raise ConfigError(f"make gpu-check needs a CUDA GPU; none is visible here ({why_no_cuda()})")


def _print_checks(checks: list[dict[str, Any]]) -> None:
    for c in checks:
        print(f"  {'ok  ' if c['ok'] else 'FAIL'}  {c['check']}: {c['detail']}")


@user_errors_exit
def main(argv: list[str] | None = None) -> int:
    """Run the checks; print them; write gpucheck.json (and the benchmark records) under <out>/<gpu>/. Returns the
    exit status: 0 when every check passed."""
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m ffnbench.bench.gpucheck", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(DEFAULT_OUT), help="where the <gpu>/ folder goes (default: %(default)s)")
    p.add_argument("--label", default=None, help="results folder (default: the GPU's name, e.g. nvidia-h200)")
    p.add_argument("--quick", action="store_true", help="a smoke run: fewer steps and repetitions")
    args = p.parse_args(argv)
    require_gpu()
    started = time.perf_counter()
    resolve_device_setup(TrainerConfig(accelerator="gpu", max_steps=1))  # a wheel without kernels for this GPU: exit 2
    torch.set_float32_matmul_precision("high")  # as train() does on a GPU
    label = args.label or gpu_label(torch.cuda.get_device_name(0))
    out = Path(args.out).expanduser() / label
    sw = software()
    print(f"ffnbench gpu-check → {out}\n  torch {sw['torch']} (CUDA {sw['cuda']}, cuDNN {sw['cudnn']}, Triton "
          f"{sw['triton']}), NVIDIA driver {sw['driver']}, precision {sw['precision']}")
    for g in sw["gpus"]:
        print(f"  GPU {g['index']}: {g['name']} (compute capability {g['capability']}, {g['memory_gib']} GiB)")
    header = {"machine": machine(label, "gpu"), "command": shlex.join(["python", "-m", "ffnbench.bench.gpucheck",
                                                                        *argv]),
              "git": git_revision()}
    steps = 60 if args.quick else TRAIN_STEPS
    warmup = 10 if args.quick else WARMUP_STEPS
    checks: list[dict[str, Any]] = []
    record: dict[str, Any] = {**header, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "quick": args.quick,
                              "software": sw, "time_budget_s": TIME_BUDGET_S}
    with tempfile.TemporaryDirectory(prefix="ffnbench-gpucheck-") as work:
        session = BenchSession(device=torch.device("cuda", 0), quick=args.quick, sizes=check_sizes(args.quick),
                               work=Path(work), cache_dir=default_cache_dir())
        record["training"] = []
        shapes = [(m, []) for m in TRAIN_MODELS] + [sweep_shape()]
        for model, extra in shapes:
            row = train_check(session, model, steps, warmup, extra)
            record["training"].append(row)
            mfu_text = f", MFU {row['mfu']:.3f} of {row['peak_flops']:.3g} FLOP/s" if row["mfu"] else ""
            tps = f"{row['tokens_per_s']:,.0f} tokens/s" if row["tokens_per_s"] else "no throughput"
            checks.append({"check": f"train {model}{' ' + ' '.join(extra) if extra else ''} compiled",
                           "ok": not row["problems"],
                           "detail": "; ".join(row["problems"]) or f"{row['status']}, {tps}{mfu_text} "
                                                                     f"({row['seconds']:.0f} s)"})
            _print_checks(checks[-1:])
        torch._dynamo.reset()
        benchmarks = run_benchmarks(session, ["overhead", "mfu", "alignment"], header, out)
        record["benchmarks"] = summarize(benchmarks)
        if torch.cuda.device_count() >= 2:
            record["ddp"] = ddp_check(session, DDP_STEPS)
            ddp = record["ddp"]
            detail = "; ".join(ddp["problems"]) or f"finished, {ddp['tokens_per_s'] or 0:,.0f} tokens/s"
            checks.append({"check": "DDP, 2 processes", "ok": not ddp["problems"], "detail": detail})
        else:
            record["ddp"] = None
            checks.append({"check": "DDP, 2 processes", "ok": True, "detail": "skipped: one GPU visible"})
    elapsed = time.perf_counter() - started
    record.update(checks=checks, ok=all(c["ok"] for c in checks), elapsed_s=elapsed)
    path = write_record(out, record)
    print(f"\nffnbench gpu-check: {'passed' if record['ok'] else 'FAILED'} in {elapsed:.0f} s "
          f"({elapsed / 60:.1f} min{', over the time budget' if elapsed > TIME_BUDGET_S else ''}) → {path}")
    _print_checks(checks)
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
