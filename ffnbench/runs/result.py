"""RunResult: the one type of a run's record. It is the only writer and reader of `<run_dir>/result.json`,
of the lines of a published `results.jsonl`, and of records rebuilt from a W&B run; the sweep planner, the
claims and the report read it and nothing else.

The blocks inside (ffn, model, params, metrics, ...) stay plain JSON objects: their keys are documented
below and in docs/runs.md. A record of an earlier schema is brought to today's as it is read (ffnbench.runs.migrate)."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ffnbench.fileio import CorruptRecord, json_safe, read_json, write_json_atomic
from ffnbench.runs.migrate import FIRST_SCHEMA, SCHEMA, migrate_record
from ffnbench.runs.provenance import git_revision, machine_record, versions

if TYPE_CHECKING:
    from ffnbench.model.ffn import FFNSize, FFNSpec
    from ffnbench.model.model import ModelConfig
    from ffnbench.placement import DeviceSetup

RESULT_FILE = "result.json"
# interrupted: stopped by SIGTERM, the pre-emption signal or Ctrl-C, its checkpoint kept; a rerun resumes it (as it
# does a failed run: neither is final)
STATUSES = ("finished", "diverged", "failed", "interrupted", "running")
FINAL_STATUSES = ("finished", "diverged")  # a rerun of the same config would only repeat these
METRICS = ("final_train_loss", "final_val_loss", "final_val_bpb", "best_val_loss", "best_val_bpb", "init_val_loss")
LOCAL_FIELDS = ("run_dir", "resumed_from_step")  # machine- or history-local: left out of a published results.jsonl
OPTIONAL_FIELDS = ("val_windows", "compile", "train_curve", "instabilities")  # written only when the run has one


def ffn_record(spec: FFNSpec, size: FFNSize) -> dict[str, Any]:
    """result.json's `ffn` block: the spec and its sizes (ffn.size_ffn)."""
    return {
        "act": spec.act, "gated": spec.gated, "sizing": spec.sizing, "ratio": spec.ratio, "bias": spec.bias,
        "multiple_of": spec.multiple_of, "approximate": spec.approximate, "label": spec.label,
        "nominal_d_ff": size.nominal_d_ff, "d_ff": size.d_ff, "params_per_layer": size.params,
        "target_params": size.target_params, "budget_mismatch": size.mismatch, "rounding": spec.rounding,
    }


def model_record(mcfg: ModelConfig, name: str | None) -> dict[str, Any]:
    """The keys of result.json's `model` block that every record has: the model's shape, and its name in the config
    (`model.name`). A training run's record adds its init and fixed-budget keys (from_training)."""
    return {"name": name, "d_model": mcfg.d_model, "n_layer": mcfg.n_layer, "n_head": mcfg.n_head,
            "seq_len": mcfg.seq_len, "vocab_size": mcfg.vocab_size}


def fixed_budget_record(target: float | None, non_embedding: int) -> dict[str, float | None]:
    """The model block's record of the Kaplan-style fixed-budget arm (model.non_embedding_params): the budget
    asked for and how far the solved d_model misses it, (actual − target) / target; None for both without one."""
    if target is None:
        return {"non_embedding_params_target": None, "non_embedding_mismatch": None}
    return {"non_embedding_params_target": float(target),
            "non_embedding_mismatch": (non_embedding - float(target)) / float(target)}


def summary_key(metric: str) -> str:
    """The wandb summary key of a result.json metric: final_val_loss -> final/val_loss."""
    return f"final/{metric.removeprefix('final_')}"



def finite(x: Any) -> bool:
    """A real number (not a bool) that is neither NaN nor infinite: what a record's numbers must be to count."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)

@dataclass
class RunResult:
    """One run, as result.json holds it. Field order is the file's key order."""

    status: str  # finished | diverged | failed | interrupted | running
    schema: int = SCHEMA
    error: str | None = None  # why it failed or diverged
    name: str | None = None  # the experiment (sweep) name
    run_name: str | None = None  # the run directory's name: <ffn label>[-<overrides>]-s<seed>
    run_dir: str | None = None
    seed: int | None = None
    config: dict = field(default_factory=dict)  # the resolved Hydra config
    ffn: dict = field(default_factory=dict)  # ffn_record: spec and sizes
    model: dict = field(default_factory=dict)  # model_record
    params: dict = field(default_factory=dict)  # accounting.ParamBreakdown.as_dict
    flops: dict = field(default_factory=dict)  # per_token_training, per_token_forward, total_training
    data: dict = field(default_factory=dict)  # the corpus, tokenizer, split sizes, val bytes per token
    metrics: dict = field(default_factory=dict)  # METRICS, nats/token and bits/byte
    ffn_stats: dict = field(default_factory=dict)  # {"init": ActivationStats record | None, "final": ...}
    curve: list = field(default_factory=list)  # [{step, tokens, val_loss, val_bpb}, ...]
    steps: int | None = None
    total_steps: int | None = None
    tokens: int | None = None
    tokens_per_step: int | None = None
    resumed_from_step: int | None = None
    throughput: dict = field(default_factory=dict)  # throughput.ThroughputMonitor.summary
    wall_time_s: float | None = None
    hardware: dict = field(default_factory=dict)  # provenance.machine_record + devices, precision, strategy
    versions: dict = field(default_factory=dict)
    git: dict = field(default_factory=dict)
    finished_at: str | None = None
    # The final validation's mean loss per window of the final validation set (nats/token, in window order). The
    # windows are a pure function of the data config and seq_len, so the i-th entries of two runs pair. None in
    # records from before it existed: then it is left out of the file, so those round-trip byte for byte.
    val_windows: list[float] | None = None
    # torch.compile: {"enabled": False}, or whether every frame was compiled and how many frames, graphs, graph breaks
    # and recompiles dynamo had (compiling.CompileWatch.record). None in records from before it existed.
    compile: dict | None = None
    # The training loss at every logging step, [[step, loss], ...]: what spikes are read from. None in older records.
    train_curve: list | None = None
    # ffnbench.runs.instability.detect's findings, [{kind, step, size, recovered}, ...], with the thresholds of the
    # run's config (`instability`). None in records from before it existed: the report recounts those from their
    # curves.
    instabilities: list | None = None

    @classmethod
    def from_training(cls, status: str, *, error: str | None, config: dict, run_dir: Path, model: ModelConfig,
                      history: Sequence[dict], last_train_loss: float | None, steps: int, tokens_per_step: int,
                      total_steps: int, resumed_from: int | None, data: dict, throughput: dict,
                      device_setup: DeviceSetup, started: float, compile: dict | None = None,
                      train_history: Sequence[tuple[int, float]] = ()) -> RunResult:
        """The record of a training run (train.train), from what it measured.

        Args:
            status: finished | diverged | failed | interrupted | running.
            error: why it failed or diverged (None otherwise).
            config: the resolved Hydra config.
            run_dir: the run directory (its name is the run's name).
            model: the ModelConfig trained (its FFNSpec included).
            history: LMModule.val_history, one record per validation ({step, tokens, val_loss, val_bpb, ffn}); the
                last may hold `final` ({val_loss, val_bpb, windows}: the final validation set), which the final
                metrics are then taken from.
            last_train_loss: the last training loss read (LMModule.last_train_loss).
            steps: optimizer steps done; tokens_per_step: global batch × seq_len; total_steps: the budget.
            resumed_from: the checkpoint's step when the run was resumed.
            data: the data module's `info`, with `val_bytes_per_token`.
            throughput: ThroughputMonitor.summary().
            device_setup: where the run trained (placement.resolve_device_setup).
            started: time.time() when train() began.
            compile: what torch.compile did (compiling.CompileWatch.record).
            train_history: (step, training loss) at every logging step (LMModule.train_history).
        """
        from ffnbench.config.schema import fixed_budget
        from ffnbench.model.accounting import count_flops, count_params
        from ffnbench.model.ffn import size_ffn
        from ffnbench.runs.instability import Thresholds, detect

        flops = count_flops(model)
        scored = [h for h in history if finite(h["val_loss"])]
        final = history[-1] if history else None
        final_set = (final or {}).get("final") or final  # the large final set when there was one
        best = min(scored, key=lambda h: h["val_loss"]) if scored else None
        init = history[0] if history and history[0]["step"] == 0 else None
        params = count_params(model)
        return cls(
            status=status,
            error=error,
            name=config.get("name"),
            run_name=run_dir.name,
            run_dir=str(run_dir),
            seed=config.get("seed"),
            config=config,
            ffn=ffn_record(model.ffn, size_ffn(model.ffn, model.d_model)),
            model={**model_record(model, config["model"].get("name")), "ffn_init": model.ffn_init, "init": model.init,
                   "qk_norm": model.qk_norm,
                   **fixed_budget_record(fixed_budget(config["model"]), params.non_embedding)},
            params=params.as_dict(),
            flops={"per_token_training": flops.training, "per_token_forward": flops.forward,
                   "total_training": flops.training * steps * tokens_per_step},
            data=data,
            metrics={  # METRICS
                "final_train_loss": last_train_loss,
                "final_val_loss": final_set["val_loss"] if final else None,
                "final_val_bpb": final_set["val_bpb"] if final else None,
                "best_val_loss": best["val_loss"] if best else None,
                "best_val_bpb": best["val_bpb"] if best else None,
                "init_val_loss": init["val_loss"] if init else None,
            },
            ffn_stats={"init": init["ffn"] if init else None, "final": final["ffn"] if final else None},
            curve=[{k: h[k] for k in ("step", "tokens", "val_loss", "val_bpb")} for h in history],
            steps=steps,
            total_steps=total_steps,
            tokens=steps * tokens_per_step,
            tokens_per_step=tokens_per_step,
            resumed_from_step=resumed_from,
            throughput=throughput,
            wall_time_s=time.time() - started,
            hardware={**machine_record(device_setup.accelerator), "devices": device_setup.devices,
                      "precision": device_setup.precision, "strategy": device_setup.strategy},
            versions=versions(),
            git=git_revision(),
            finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            val_windows=((final or {}).get("final") or {}).get("windows"),
            compile=compile,
            train_curve=[[int(s), float(v)] for s, v in train_history],
            instabilities=[i.as_dict() for i in detect(
                status=status, steps=steps, val_curve=[(h["step"], h["val_loss"]) for h in history],
                train_curve=list(train_history), unigram_loss=data.get("unigram_loss"),
                warmup_steps=int((config.get("optim") or {}).get("warmup_steps") or 0),
                thresholds=Thresholds.from_config(config.get("instability")),
                final_loss=final_set["val_loss"] if final else None, uniform_loss=math.log(model.vocab_size))],
        )

    # ---- (de)serialisation ------------------------------------------------------------------------------

    def to_json(self, portable: bool = False) -> dict[str, Any]:
        """The record as JSON data (NaN/inf as null). `portable` leaves out the machine-local fields: that is a
        line of a published results.jsonl."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data = {"schema": data.pop("schema"), **data}  # the schema leads the file
        for key in OPTIONAL_FIELDS:  # absent, not null, when the run has none
            if data[key] is None:
                data.pop(key)
        if portable:
            for key in LOCAL_FIELDS:
                data.pop(key)
        return json_safe(data)

    @classmethod
    def from_json(cls, data: dict, where: str = "record") -> RunResult:
        """A record from JSON data, of any schema up to SCHEMA (migrated: ffnbench.runs.migrate); CorruptRecord when it
        is not one. Missing blocks load as empty (a record rebuilt from W&B lacks some); unknown keys are ignored."""
        if not isinstance(data, dict):
            raise CorruptRecord(f"{where}: expected a JSON object, found {type(data).__name__}")
        if data.get("status") not in STATUSES:
            raise CorruptRecord(f"{where}: no valid 'status' (got {data.get('status')!r})")
        schema = data.get("schema", FIRST_SCHEMA)
        if not isinstance(schema, int) or schema > SCHEMA:
            raise CorruptRecord(f"{where}: schema {schema!r} is newer than this ffnbench reads ({SCHEMA}); "
                                "update ffnbench")
        if schema < FIRST_SCHEMA:
            raise CorruptRecord(f"{where}: schema {schema!r} is no schema version (the first is {FIRST_SCHEMA})")
        data = migrate_record(data)
        known = {f.name: f for f in fields(cls)}
        kwargs = {}
        for key, value in data.items():
            if key not in known:
                continue
            if value is None and isinstance(known[key].default_factory, type):  # a null block loads as empty
                continue
            kwargs[key] = value
        return cls(**kwargs)

    @classmethod
    def read(cls, run_dir: Path) -> RunResult | None:
        """The run's result.json, None if there is none; CorruptRecord if it cannot be used."""
        path = Path(run_dir) / RESULT_FILE
        if not path.exists():
            return None
        return cls.from_json(read_json(path), str(path))

    def write(self, run_dir: Path) -> Path:
        """Atomically: a reader sees the old record or the new one, never half of one."""
        path = Path(run_dir) / RESULT_FILE
        write_json_atomic(path, self.to_json())
        return path

    def jsonl_line(self) -> str:
        """This record as one line of a published results.jsonl."""
        return json.dumps(self.to_json(portable=True), allow_nan=False) + "\n"

    def replace(self, **changes: Any) -> RunResult:
        return dataclasses.replace(self, **changes)

    # ---- what readers ask of it ------------------------------------------------------------------------

    @property
    def final(self) -> bool:
        return self.status in FINAL_STATUSES

    def metric(self, name: str) -> float | None:
        """A metric as a finite float, None when missing or non-finite."""
        value = (self.metrics or {}).get(name)
        return float(value) if finite(value) else None

    def wandb_summary(self) -> dict[str, Any]:
        """What the run's W&B summary holds (from_wandb reads the same keys back)."""
        thr = self.throughput or {}
        stats = (self.ffn_stats or {}).get("final") or {}
        return {
            **{summary_key(k): v for k, v in (self.metrics or {}).items()},
            "status": self.status,
            "tokens": self.tokens,
            "params/total": (self.params or {}).get("total"),
            "params/ffn_per_layer": (self.ffn or {}).get("params_per_layer"),
            "ffn/d_ff": (self.ffn or {}).get("d_ff"),
            "perf/tokens_per_s": thr.get("tokens_per_s"),
            "perf/mfu": thr.get("mfu"),
            **{f"final/ffn_{k}": v for k, v in (stats.get("mean") or {}).items()},
        }
