"""`make gpu-check` (`python -m ffnbench.bench.gpucheck`): a GPU machine checked end to end in one script, sized to
finish within TIME_BUDGET_S on one GPU, its findings written to <out>/<gpu>/gpucheck.json after every check:

  software   torch, CUDA, the NVIDIA driver, cuDNN, Triton, the GPUs, their compute capability, the precision
  process    a sweep run's process start: the interpreter, the imports, Hydra's composition (a subprocess)
  train ×3   the GPU sweeps' own shapes (conf/experiment/_gpu.yaml: `small` and the size arm's `base`, an 8192-token
             BPE vocabulary, batch 64; `small` with SwiGLU) through ffnbench.train.train() as a sweep's run, under
             trainer=gpu (mixed precision, blocks compiled), each in a folder of its own (gpucheck_train): fails a
             run whose blocks ran eager (a graph break, a frame dynamo gave up on), compiled after warm-up, compiled
             a symbolic (dynamic) shape, or compiled more than one training graph per function (validation eager)
             (result.json's compile record); records its MFU against the datasheet dense peak, the host-device
             syncs per step (torch.cuda.set_sync_debug_mode("warn")) and its fixed costs (start to first step,
             compile seconds, a validation pass, a checkpoint)
  overhead   the pipeline ÷ hand-loop ratio at the sweep's small shape (bench/overhead_compare.compare)
  alignment  claim C9's benchmark (bench/alignment.py; alignment.json next to gpucheck.json)
  ddp        with two GPUs visible: a 2-process DDP run (trainer=ddp trainer.devices=2, compiled)

and the `price` block the sweep's price reads (gpucheck_price: MFU and a run's fixed overhead per model group).
A check that would start past the time budget is recorded as skipped; one that raises is recorded as failed and
the next one runs.

--cpu-smoke runs the same control flow on the CPU at micro scale (every check; the CUDA-only calls skipped or
substituted, and each row says so) and writes <out>/gpucheck.json.

Exit status 0 when every check passed, 1 when one failed or was skipped; without a GPU (and without --cpu-smoke), 2
and one line that says why none is visible (a CPU-only torch, a driver older than the wheel's CUDA, hidden GPUs)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import ffnbench.bench.alignment as alignment
from ffnbench.bench.cli import DEFAULT_OUT, default_cache_dir, machine, run_benchmarks
from ffnbench.bench.contenders import val_set_tokens
from ffnbench.bench.gpucheck_plan import SWEEP_EXPERIMENT, Plan, gpu_plan, smoke_plan
from ffnbench.bench.gpucheck_price import price_block, process_start, sweep_run
from ffnbench.bench.gpucheck_train import Shape, train_check, train_detail, train_overrides
from ffnbench.bench.session import BenchSession
from ffnbench.cli import user_errors_exit
from ffnbench.config.schema import TrainerConfig
from ffnbench.errors import ConfigError
from ffnbench.placement import nvidia_driver_version, resolve_device_setup, resolve_precision, why_no_cuda
from ffnbench.runs.provenance import git_revision

TIME_BUDGET_S = 480  # what the plan below is sized for on one H100 (docs/benchmarks.md: the estimate)
# ---- the record, written after every check -------------------------------------------------------------------


class Checklist:
    """gpu-check's checks, run in order, each recorded as it ends: gpucheck.json is rewritten (atomically) after
    every one, so a crash or a kill keeps what was measured. A check that would start past the time budget is
    recorded as "skipped: time budget"; one that raises is recorded as failed, and the next one runs.

    Args:
        out: the folder gpucheck.json goes to.
        record: the record; its `checks` list gets a row per check.
        budget_s: seconds from the start after which no check starts.
        update: called before every write (the price block is worked out from the rows so far).
        clock: seconds, monotonic.
    """

    def __init__(self, out: Path, record: dict[str, Any], budget_s: float, update: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.perf_counter):
        self.out, self.record, self.budget_s, self.update, self.clock = out, record, budget_s, update, clock
        self.started = clock()
        record.setdefault("checks", [])

    def run(self, name: str, check: Callable[[], tuple[bool, str]]) -> None:
        """Run `check` (it returns (passed, a line of detail) and puts its figures in the record) unless the
        budget is spent; record its row; write the record."""
        elapsed = self.clock() - self.started
        if elapsed > self.budget_s:
            row = {"check": name, "ok": False, "skipped": "time budget",
                   "detail": f"skipped: time budget ({elapsed:.0f} s spent of {self.budget_s:.0f} s)"}
        else:
            start = self.clock()
            try:
                ok, detail = check()
            except Exception as e:  # recorded; the checks after it still run
                ok, detail = False, f"failed: {type(e).__name__}: {' '.join(str(e).split())[:2000]}"
            row = {"check": name, "ok": bool(ok), "detail": detail, "seconds": self.clock() - start}
        self.record["checks"].append(row)
        print_checks([row])
        self.write()

    def write(self, finished: bool = False) -> Path:
        self.update()
        checks = self.record["checks"]
        self.record.update(ok=bool(checks) and all(c["ok"] for c in checks), finished=finished,
                           elapsed_s=self.clock() - self.started)
        return write_record(self.out, self.record)


def write_record(out_dir: Path, record: dict[str, Any]) -> Path:
    """gpucheck.json in `out_dir` (atomic, NaN as null)."""
    from ffnbench.fileio import write_json_atomic

    path = Path(out_dir) / "gpucheck.json"
    write_json_atomic(path, record)
    return path


def print_checks(checks: list[dict[str, Any]]) -> None:
    for c in checks:
        print(f"  {'ok  ' if c['ok'] else 'SKIP' if c.get('skipped') else 'FAIL'}  {c['check']}: {c['detail']}",
              flush=True)


# ---- the checks -------------------------------------------------------------------------------------------------


def gpu_label(device_name: str) -> str:
    """The results folder of a GPU model: "NVIDIA H200 NVL" → nvidia-h200-nvl."""
    return "-".join(re.findall(r"[a-z0-9]+", device_name.lower())) or "gpu"


def software(gpu: bool) -> dict[str, Any]:
    """torch, CUDA, driver, cuDNN, Triton and the GPUs, as the records keep them (on the CPU: no GPU, fp32)."""
    from ffnbench.runs.provenance import versions

    gpus = [{"index": i, "name": torch.cuda.get_device_name(i),
             "capability": ".".join(map(str, torch.cuda.get_device_capability(i))),
             "memory_gib": round(torch.cuda.get_device_properties(i).total_memory / 2**30, 1)}
            for i in range(torch.cuda.device_count())] if gpu else []
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "driver": nvidia_driver_version() if gpu else None,
            "cudnn": torch.backends.cudnn.version() if gpu else None, "triton": versions().get("triton"),
            "arch_list": torch.cuda.get_arch_list() if gpu else [],
            "precision": resolve_precision("gpu" if gpu else "cpu", "auto"), "gpus": gpus}


def flops_per_token(session: BenchSession, shape: Shape) -> float:
    """Training FLOPs per token of `shape`, causal attention counted as computed (as ThroughputMonitor counts)."""
    from ffnbench.config.compose import compose
    from ffnbench.config.schema import model_config
    from ffnbench.data.tokenizer import vocab_size_for
    from ffnbench.model.accounting import count_flops

    cfg = compose(train_overrides(session, shape, session.work / "unused", compile=False))
    return count_flops(model_config(cfg, vocab_size_for(cfg.data)), causal=True).training


def overhead_check(session: BenchSession, plan: Plan, peak: float | None) -> dict[str, Any]:
    """The pipeline and the hand loop side by side inside one run at the plan's compare shape
    (overhead_compare.compare), compiled as the training checks are (the inductor cache makes it a recompile of
    graphs already built), without the FFN statistics' timing; both contenders' MFU against `peak`."""
    from ffnbench.bench.overhead_compare import RATIO_GOAL, compare

    shape = plan.compare
    options = [*shape.extra, f"trainer.compile={str(plan.compile).lower()}"]
    row = compare(session, shape.model, plan.compare_steps, options, gpu_sized=True, stats_reps=0, batch=shape.batch)
    flops = flops_per_token(session, shape)
    pipe, hand = row["pipeline_tokens_per_s"]["median"], row["hand_tokens_per_s"]["median"]
    return {"label": shape.label, "model": shape.model, "batch_size": row["batch_size"], "options": options,
            "steps": list(plan.compare_steps), "ratio": row["ratio"], "ratio_iqr_share": row["ratio_iqr_share"],
            "goal": RATIO_GOAL, "meets_goal": row["meets_goal"], "pipeline_tokens_per_s": row["pipeline_tokens_per_s"],
            "hand_tokens_per_s": row["hand_tokens_per_s"], "hand_ms_per_step": row["hand_ms_per_step"],
            "pipeline_ms_per_step_extra": row["pipeline_ms_per_step_extra"], "flops_per_token": flops,
            "pipeline_mfu": pipe * flops / peak if peak else None, "hand_mfu": hand * flops / peak if peak else None}


def ddp_check(session: BenchSession, shape: Shape, steps: int, compile: bool) -> dict[str, Any]:
    """A 2-process DDP run of `shape`, as `python -m ffnbench.train trainer=ddp trainer.devices=2` (on a CPU: two
    gloo processes)."""
    run_dir = session.work / "ddp"
    val_tokens = val_set_tokens(session, shape.model, shape.batch)
    command = [sys.executable, "-m", "ffnbench.train", f"model={shape.model}", f"data.batch_size={shape.batch}",
               *shape.extra, "trainer=ddp", "trainer.devices=2", *([] if session.gpu else ["trainer.accelerator=cpu"]),
               f"trainer.compile={str(compile).lower()}", f"trainer.max_steps={steps}", "trainer.val_every=1000000",
               "trainer.ckpt_every=1000000", "trainer.progress_bar=false", "logger=csv",
               f"data.val_tokens={val_tokens}", f"data.final_val_tokens={val_tokens}",
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


def alignment_summary(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures gpucheck.json quotes from alignment.json (which sits next to it)."""
    return [{"d_ff": r["d_ff"], "ms": r["ms_median"], "ns_per_param": r["ns_per_param"]} for r in record["rows"]]


def keep_result(row: dict[str, Any], out: Path) -> None:
    """A training check's result.json, kept under <out>/train/<its folder>/ (the run folder is scratch)."""
    source = Path(row["run_dir"]) / "result.json"
    if source.exists():
        target = out / "train" / Path(row["run_dir"]).name / "result.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)


def require_gpu() -> None:
    """A ConfigError (one line, exit 2) when CUDA sees no GPU here, saying why."""
    if not torch.cuda.is_available():
        raise ConfigError(f"make gpu-check needs a CUDA GPU; none is visible here ({why_no_cuda()}); "
                          "--cpu-smoke runs its control flow on the CPU")


def run_checks(plan: Plan, device: torch.device, out: Path, label: str, command: list[str], budget_s: float,
               cache_dir: Path | None = None) -> dict[str, Any]:
    """Run `plan` on `device`: every check in order, its row printed and gpucheck.json written to `out` after each.
    Returns the record (its `ok`: every check passed)."""
    gpu = device.type == "cuda"
    header = {"machine": machine(label, "gpu" if gpu else "cpu"),
              "command": shlex.join(["python", "-m", "ffnbench.bench.gpucheck", *command]), "git": git_revision()}
    gpu_name = header["machine"].get("gpu")
    runs = {group: sweep_run(SWEEP_EXPERIMENT, overrides) for group, overrides in plan.price_runs.items()}
    record: dict[str, Any] = {
        **header, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "mode": plan.mode, "quick": plan.mode != "gpu",
        "substitutions": list(plan.substitutions),
        "time_budget_s": budget_s if math.isfinite(budget_s) else None,
        "plan": {"shapes": [dataclasses.asdict(s) for s in plan.shapes], "compare": plan.compare.label,
                 "compare_steps": list(plan.compare_steps), "ddp_steps": plan.ddp_steps, "compile": plan.compile},
        "software": None, "process_start": None, "training": [], "overhead": None, "alignment": None, "ddp": None,
        "price": None, "checks": []}

    def update_price() -> None:
        process_s = (record["process_start"] or {}).get("seconds")
        record["price"] = price_block(gpu_name, record["training"], process_s, runs)

    out.mkdir(parents=True, exist_ok=True)
    checks = Checklist(out, record, budget_s, update_price)
    sw = record["software"] = software(gpu)
    print(f"ffnbench gpu-check [{plan.mode}] → {out / 'gpucheck.json'}\n  torch {sw['torch']} (CUDA {sw['cuda']}, "
          f"cuDNN {sw['cudnn']}, Triton {sw['triton']}), NVIDIA driver {sw['driver']}, precision {sw['precision']}")
    for g in sw["gpus"]:
        print(f"  GPU {g['index']}: {g['name']} (compute capability {g['capability']}, {g['memory_gib']} GiB)")
    for s in plan.substitutions:
        print(f"  substituted: {s}")
    with tempfile.TemporaryDirectory(prefix="ffnbench-gpucheck-") as work:
        session = BenchSession(device=device, quick=plan.mode != "gpu", sizes=plan.sizes, work=Path(work),
                               cache_dir=cache_dir or default_cache_dir())

        def software_check() -> tuple[bool, str]:
            gpus = ", ".join(g["name"] for g in sw["gpus"]) or "no GPU (substituted: the CPU)"
            return True, f"torch {sw['torch']}, CUDA {sw['cuda']}, {gpus}, {sw['precision']}"

        def process_check() -> tuple[bool, str]:
            record["process_start"] = process_start([f"experiment={SWEEP_EXPERIMENT}"])
            return True, f"{record['process_start']['seconds']:.1f} s to compose a sweep run's config"

        def training(shape: Shape) -> Callable[[], tuple[bool, str]]:
            def check() -> tuple[bool, str]:
                row = train_check(session, shape, compile=plan.compile)
                record["training"].append(row)
                keep_result(row, out)
                return not row["problems"], train_detail(row)

            return check

        def overhead() -> tuple[bool, str]:
            peak = next((r["peak_flops"] for r in record["training"] if r.get("peak_flops")), None)
            o = record["overhead"] = overhead_check(session, plan, peak)
            met = "met" if o["meets_goal"] else "not met"
            mfu = f", MFU {o['pipeline_mfu']:.3f} vs {o['hand_mfu']:.3f}" if o["hand_mfu"] else ""
            return True, (f"pipeline ÷ hand loop {o['ratio']['median']:.3f} ± {o['ratio']['iqr'] / 2:.3f} "
                          f"(goal ≥ {o['goal']}: {met}){mfu}")

        def alignment_check() -> tuple[bool, str]:
            records = run_benchmarks(session, [alignment.NAME], header, out)
            rows = record["alignment"] = alignment_summary(records[alignment.NAME])
            return True, ", ".join(f"d_ff {r['d_ff']}: {r['ms']:.3g} ms" for r in rows)

        def ddp() -> tuple[bool, str]:
            if gpu and torch.cuda.device_count() < 2:
                return True, "skipped: one GPU visible"
            d = record["ddp"] = ddp_check(session, plan.compare, plan.ddp_steps, plan.compile)
            where = "" if gpu else " (substituted: 2 gloo processes on the CPU)"
            return not d["problems"], ("; ".join(d["problems"]) or
                                       f"finished on {d['world_size']} processes{where}, "
                                       f"{d['tokens_per_s'] or 0:,.0f} tokens/s")

        checks.run("software", software_check)
        checks.run("process start", process_check)
        for shape in plan.shapes:
            checks.run(f"train {shape.label}" + (" compiled" if plan.compile else " eager"), training(shape))
        checks.run(f"pipeline ÷ hand loop at {plan.compare.label}", overhead)
        checks.run("alignment (C9)", alignment_check)
        checks.run("DDP, 2 processes", ddp)
    path = checks.write(finished=True)
    elapsed = record["elapsed_s"]
    print(f"\nffnbench gpu-check: {'passed' if record['ok'] else 'FAILED'} in {elapsed:.0f} s "
          f"({elapsed / 60:.1f} min{', over the time budget' if elapsed > budget_s else ''}) → {path}")
    print_checks(record["checks"])
    return record


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ffnbench.bench.gpucheck", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None,
                   help=f"where the <gpu>/ folder goes (default: {DEFAULT_OUT}); with --cpu-smoke, the folder "
                        "gpucheck.json goes to (required)")
    p.add_argument("--label", default=None, help="results folder (default: the GPU's name, e.g. nvidia-h200)")
    p.add_argument("--quick", action="store_true", help="a short run on a GPU: fewer steps and repetitions")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="gpu-check's control flow on the CPU at micro scale (every check; CUDA-only calls skipped or "
                        "substituted, and said so), into --out")
    p.add_argument("--time-budget", type=float, default=None,
                   help=f"seconds after which no check starts (default: {TIME_BUDGET_S} on a GPU, none with "
                        "--cpu-smoke)")
    return p


@user_errors_exit
def main(argv: list[str] | None = None) -> int:
    """Run the checks; print them; write gpucheck.json (and alignment.json) under <out>/<gpu>/ (with --cpu-smoke:
    <out>/). Returns the exit status: 0 when every check passed."""
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    if args.time_budget is not None and not args.time_budget >= 0:
        raise ConfigError(f"--time-budget: expected seconds ≥ 0, got {args.time_budget}")
    if args.cpu_smoke:
        if args.out is None:
            raise ConfigError("--cpu-smoke needs --out DIR: the folder its gpucheck.json goes to (e.g. --out /tmp/g)")
        out = Path(args.out).expanduser() / (args.label or "")
        budget = float("inf") if args.time_budget is None else args.time_budget
        record = run_checks(smoke_plan(), torch.device("cpu"), out, args.label or "cpu-smoke", argv, budget)
        return 0 if record["ok"] else 1
    require_gpu()
    resolve_device_setup(TrainerConfig(accelerator="gpu", max_steps=1))  # a wheel without kernels for this GPU: exit 2
    torch.set_float32_matmul_precision("high")  # as train() does on a GPU
    label = args.label or gpu_label(torch.cuda.get_device_name(0))
    out = Path(args.out or DEFAULT_OUT).expanduser() / label
    budget = TIME_BUDGET_S if args.time_budget is None else args.time_budget
    record = run_checks(gpu_plan(args.quick), torch.device("cuda", 0), out, label, argv, budget)
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
