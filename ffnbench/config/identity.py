"""What makes two runs the same run: the keys of a resolved config that change what a run computes
(NON_IDENTITY_KEYS are the others), the device and precision a run stores as resolved (HARDWARE_KEYS), and the
comparisons built on them: identity_diff (which keys differ) and identity_key (a hashable form, for grouping)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

# Settings that change where or how a run is observed, not what it computes. Two runs that differ only in
# these are the same run: a sweep may resume one from the other's checkpoint.
NON_IDENTITY_KEYS = (
    "run_dir",
    "name",
    "runs_root",
    "logger",
    "slurm",
    "data.cache_dir",
    "data.loader",  # follows from data.source (conf/data/<source>.yaml)
    "data.num_proc",
    "trainer.progress_bar",
    "trainer.log_every",
    "trainer.compile",
    "trainer.compile_mode",
    "trainer.devices",
    "trainer.num_nodes",
    "trainer.strategy",
    "trainer.peak_flops",
    "trainer.ckpt_every",
    "trainer.inner_steps",  # how many optimizer steps one Lightning batch holds: the same steps, in the same order
    "trainer.loss_chunk",  # how the loss is computed (model.LossHead), as trainer.compile: the same loss up to rounding
    "model.max_budget_mismatch",  # a bound that refuses a config; it changes nothing a run computes
    "lr_protocol",  # which runs a sweep makes to choose an lr (ffnbench.claims.lr_protocol), not what one computes
    "instability",  # the thresholds that name a run's instabilities when it is recorded (ffnbench.runs.instability)
    "hydra",
)

def flatten(node: Mapping, prefix: str = "") -> dict[str, Any]:
    """A nested config as {dotted key: value}, e.g. {"optim": {"lr": 1}} → {"optim.lr": 1}."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


# What a run resolves on the machine it starts on, stored resolved in its config (with_hardware): the device kind
# and the precision change what it computes, so they are part of its identity.
HARDWARE_KEYS = ("trainer.accelerator", "trainer.precision")


def with_hardware(config: dict, accelerator: str | None, precision: str | None) -> dict:
    """`config` with `trainer.accelerator` and `trainer.precision` as a run resolves them
    (placement.resolve_device_setup: cpu | gpu, and Lightning's full precision name) in place of what was asked
    (auto); None keeps what was asked
    (the sweep planner, for what only the node a run starts on can decide)."""
    trainer = dict(config.get("trainer") or {})
    if accelerator is not None:
        trainer["accelerator"] = accelerator
    if precision is not None:
        trainer["precision"] = precision
    return {**config, "trainer": trainer}


def identity_diff(a: Mapping, b: Mapping, ignore: Iterable[str] = NON_IDENTITY_KEYS) -> dict[str, tuple]:
    """Keys whose values differ between two resolved configs of today's form (a stored one is read through
    ffnbench.runs.migrate), ignoring the keys that don't change what a run computes. {key: (a_value, b_value)}; a key
    one config lacks counts as None."""
    keep = _kept(ignore)
    fa, fb = flatten(a), flatten(b)
    return {k: (fa.get(k), fb.get(k)) for k in sorted(set(fa) | set(fb)) if keep(k) and fa.get(k) != fb.get(k)}


def identity_key(config: Mapping, ignore: Iterable[str] = NON_IDENTITY_KEYS) -> frozenset:
    """A hashable form of what identity_diff compares: two configs have equal keys exactly when identity_diff finds
    no difference between them (missing keys are absent, not None; equal values compare equal, 1 and 1.0 too). For
    grouping many configs at once (a sweep's tuning runs) without comparing every pair."""
    keep = _kept(ignore)
    if isinstance(config, DictConfig):
        config = OmegaConf.to_container(config, resolve=True)
    return frozenset((k, _hashable(v)) for k, v in flatten(config).items() if keep(k) and v is not None)


def _kept(ignore: Iterable[str]):
    ignore = tuple(ignore)
    return lambda key: not any(key == k or key.startswith(k + ".") for k in ignore)


def _hashable(value: Any) -> Any:
    if isinstance(value, Mapping):
        return frozenset((k, _hashable(v)) for k, v in value.items())
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, tuple):  # identity_diff tells a tuple from the list of the same items (records hold lists)
        return (tuple, *(_hashable(v) for v in value))
    return value
