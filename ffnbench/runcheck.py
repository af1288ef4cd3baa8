"""One run's settings checked before anything is written or read (`check_run`): what `ffnbench.train` does first,
and what a sweep asks of each distinct config before it launches anything (sweep.validation). A module of its own
so that the sweep imports it without the training loop (train imports the sweep's progress line)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from ffnbench.claims.lr_protocol import check_protocols
from ffnbench.config.identity import with_hardware
from ffnbench.config.schema import OptimConfig, TrainerConfig, run_spec, to_container
from ffnbench.data import LMDataModule, check_windows
from ffnbench.data.tokenizer import vocab_size_for
from ffnbench.errors import ConfigError
from ffnbench.model.model import ModelConfig
from ffnbench.placement import DeviceSetup, resolve_device_setup
from ffnbench.runs.rundir import resolve_run_dir
from ffnbench.training.loggers import wandb_mode


@dataclass(frozen=True)
class Run:
    """One run's settings, every one checked, and its data module (built, not yet loaded)."""

    config: dict  # the resolved config: run_config.json, the checkpoint's fingerprint, result.json's `config`
    run_dir: Path
    model: ModelConfig
    optim: OptimConfig
    trainer: TrainerConfig
    device_setup: DeviceSetup
    data: LMDataModule
    tokens_per_step: int
    total_steps: int
    seed: int


def check_run(cfg: DictConfig) -> Run:
    """Every check that needs no data read: a bad setting is a ConfigError naming it, before any file is written."""
    config = to_container(cfg)
    run_dir = resolve_run_dir(cfg)
    spec = run_spec(cfg, vocab_size_for(cfg.data))
    model, trainer = spec.model, spec.trainer
    device_setup = resolve_device_setup(trainer)
    # stored resolved: part of the run's identity
    config = with_hardware(config, device_setup.accelerator, device_setup.precision)
    if trainer.compile_mode == "reduce-overhead" and device_setup.accelerator != "gpu":
        raise ConfigError("trainer.compile_mode=reduce-overhead: CUDA graphs need a CUDA GPU and this run is on the "
                          f"{device_setup.accelerator}; use trainer.compile_mode=default")
    if config["logger"].get("wandb"):
        wandb_mode(config["logger"]["wandb"].get("mode"))
    check_protocols(config)
    data = LMDataModule(cfg.data, seq_len=model.seq_len, seed=spec.seed,  # the data settings' checks
                        inner_steps=trainer.steps_per_batch())
    check_windows(data.config, model.seq_len, world_size=device_setup.devices * trainer.num_nodes)  # the batch splits
    tokens_per_step = data.batch_size * model.seq_len
    return Run(config, run_dir, model, spec.optim, trainer, device_setup, data, tokens_per_step,
               spec.total_steps(tokens_per_step), spec.seed)
