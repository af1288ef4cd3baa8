"""Records, configs and checkpoints written by earlier versions of ffnbench, brought to today's form as they are
read, so that whatever compares, groups or judges them (identity_diff, the planner, the claims) sees one form.

A run's record (result.json, a line of results.jsonl) carries its schema version. When a record gains a field or
a field changes meaning, SCHEMA goes up by one and RECORD_STEPS gains the step from the previous version: what a
record of that version meant, written in today's terms. A record is read through every step from its version on.
A config (run_config.json, a checkpoint's fingerprint, a W&B run's config) carries no version: migrate_config
fills in what it lacks and rewrites what it wrote otherwise, and leaves a config of today as it is."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from ffnbench.placement import PRECISION_ALIASES

# The keys a config gained over time, and what a config without one meant: a run before lr tuning was not a tuning
# run, one before trainer.deterministic was not deterministic, one before model.init, model.ffn_init, model.qk_norm
# and optim.z_loss had GPT-2's init, no QK-norm and no z-loss, one before ffn.max_mismatch had train.yaml's 0.02, and
# one before model.init_gain had no gain (1.0: every init but `scaled` takes only that).
CONFIG_DEFAULTS: dict[str, Any] = {"tuning": False, "trainer.deterministic": False, "model.init": "gpt2",
                                   "model.ffn_init": "gpt2", "model.qk_norm": False, "optim.z_loss": 0.0,
                                   "ffn.max_mismatch": 0.02, "model.init_gain": 1.0}
# A config that does not store its device resolved (`auto`, or no key) trained on a CPU: the only device ffnbench
# used until the device and precision were stored as resolved.
UNRESOLVED_ACCELERATOR = "cpu"


def migrate_config(config: dict) -> dict:
    """`config` (a resolved run config, nested) in today's form: the keys it lacks (CONFIG_DEFAULTS) as what they
    meant, and the trainer's accelerator and precision as a run stores them now (trainer.accelerator cpu | gpu,
    Lightning's full precision name). A copy; a config of today comes back equal."""
    out = copy.deepcopy(config)
    for dotted, value in CONFIG_DEFAULTS.items():
        *path, key = dotted.split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node.setdefault(key, value)
    trainer = out.setdefault("trainer", {})
    accelerator = trainer.get("accelerator")
    accelerator = UNRESOLVED_ACCELERATOR if accelerator in (None, "auto") else accelerator
    trainer["accelerator"] = "gpu" if accelerator == "cuda" else accelerator
    precision = trainer.get("precision")
    if precision is not None:
        precision = PRECISION_ALIASES.get(str(precision), precision)
    if precision in (None, "auto") and trainer["accelerator"] == "cpu":
        precision = "32-true"
    if precision is not None:
        trainer["precision"] = precision
    return out


def _complete_config(record: dict) -> dict:
    """The record with its config in today's form (migrate_config; a record without a config has none to complete).
    Schema 1 → 2: a record of schema 1 may lack config keys, and may hold its device and precision as asked.
    Schema 2 → 3: a config of schema 2 was complete as of its day, and model.init_gain came later."""
    return {**record, "config": migrate_config(record["config"])} if record.get("config") else record


# The step from each schema version to the next.
RECORD_STEPS: dict[int, Callable[[dict], dict]] = {1: _complete_config, 2: _complete_config}
SCHEMA = max(RECORD_STEPS) + 1  # the version of a record written today
FIRST_SCHEMA = min(RECORD_STEPS)  # a record without a `schema` key is of the first


def migrate_record(record: dict) -> dict:
    """A record (result.json or a results.jsonl line, as JSON data) of any schema up to SCHEMA, in today's form
    (its `schema` then says SCHEMA). The caller refuses a record of a newer schema, or one whose schema is no
    version, before asking."""
    version = record.get("schema", FIRST_SCHEMA)
    for step in range(version, SCHEMA):
        record = RECORD_STEPS[step](record)
    return {**record, "schema": SCHEMA}


def migrate_checkpoint(checkpoint: dict, inner_steps: int | None = None) -> None:
    """A checkpoint (as torch.load returns it) made ready to resume from, in place, before Lightning restores its
    loops (module.LMModule.on_load_checkpoint) or the planner compares its fingerprint (rundir):

    - its config fingerprint in today's form (migrate_config);
    - its optimizer step count where manual optimization reads it: a checkpoint of Lightning's automatic
      optimization (a step per batch) holds it where manual optimization does not look, and would restart
      trainer.global_step at 0;
    - with `inner_steps` (optimizer steps per Lightning batch, which may differ from the run that wrote it), its
      batch counts made to agree with its step. Lightning schedules validation by counting batches, so after a
      resume batch n must again end at step (n + 1)·inner_steps, whichever step the run stopped at (mid-batch, by
      Ctrl-C or an error, the unfinished batch is taken again from that step: data.TrainBatches).
    """
    saved = checkpoint.get("ffnbench")
    if isinstance(saved, dict) and isinstance(saved.get("fingerprint"), dict):
        saved["fingerprint"] = migrate_config(saved["fingerprint"])
    loop = checkpoint.get("loops", {}).get("fit_loop", {})
    manual = loop.get("epoch_loop.manual_optimization.optim_step_progress")
    batches = loop.get("epoch_loop.batch_progress")
    if not manual or not batches:
        return
    automatic = loop.get("epoch_loop.automatic_optimization.optim_progress", {}).get("optimizer", {}).get("step")
    if automatic and automatic["total"]["completed"] and not manual["total"]["completed"]:
        manual = loop["epoch_loop.manual_optimization.optim_step_progress"] = copy.deepcopy(automatic)
    if inner_steps is None:
        return
    done = manual["total"]["completed"] // inner_steps
    for part in ("total", "current"):
        batches[part] = {k: done for k in batches[part]}
