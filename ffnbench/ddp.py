"""A run's processes: its rank (torchrun, SLURM or Lightning's own launcher), the DDP environment a run leaves as
it found it, the cluster environment Lightning is given, and the relaunch of one sweep job for each extra DDP
process. placement.py decides where a run trains; this module, how many processes train it and which one this is."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ffnbench.placement import DeviceSetup


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", 0)))


def global_rank() -> int:
    """This process's rank: torchrun's RANK; else, for a rank Lightning (or torchrun) spawned itself (LOCAL_RANK
    set), its node's first rank plus LOCAL_RANK — before SLURM_PROCID, which such a rank inherits from the one task
    `srun --pty bash` started (each would think it is rank 0); else SLURM's, for tasks srun launched; else 0."""
    env = os.environ
    if "RANK" in env:
        return int(env["RANK"])
    if "LOCAL_RANK" in env:
        node = int(env.get("NODE_RANK", env.get("GROUP_RANK", 0)))
        if node == 0:
            return int(env["LOCAL_RANK"])
        nodes = int(env.get("SLURM_NNODES") or env.get("NUM_NODES") or 1)
        per_node = int(env.get("LOCAL_WORLD_SIZE") or int(env.get("WORLD_SIZE", nodes)) // max(1, nodes))
        return node * per_node + int(env["LOCAL_RANK"])
    return int(env.get("SLURM_PROCID", 0))


# What a DDP launch writes into its launching process's environment (Lightning's launcher sets them for the ranks it
# spawns, in os.environ): left behind, the next run of the same process (a sweep's next job, a reused joblib
# worker) would take its processes for externally created and reuse the finished launch's process group.
DDP_ENV = ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
           "MASTER_PORT", "PL_GLOBAL_SEED", "PL_SEED_WORKERS")


@contextlib.contextmanager
def ddp_scope() -> Iterator[None]:
    """Run one training run, then leave the process as it found it: the DDP variables of DDP_ENV restored and a
    process group the run initialised destroyed, so that the next run in this process starts clean."""
    import torch.distributed as dist

    before = {k: os.environ.get(k) for k in DDP_ENV}
    had_group = dist.is_available() and dist.is_initialized()
    try:
        yield
    finally:
        if dist.is_available() and dist.is_initialized() and not had_group:
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def slurm_made_the_ranks(world: int) -> bool:
    """Whether SLURM started one task per DDP process of this run (`srun --ntasks-per-node=N`, or a submitit job
    with a task per device): SLURM_NTASKS equals the world size (Lightning's SLURM environment then asks for
    --ntasks-per-node, and says so). Inside an allocation of fewer tasks (`sbatch -n1`, a joblib sweep in one) the
    run spawns its own ranks."""
    return "SLURM_JOB_ID" in os.environ and int(os.environ.get("SLURM_NTASKS") or 0) == world


def cluster_environment(setup: DeviceSetup, num_nodes: int = 1):
    """The cluster environment Lightning is given for a multi-process run, None for one process or a torchrun
    launch (Lightning detects that one itself). Lightning would pick its SLURM environment inside any SLURM
    allocation and believe SLURM made the processes: with one task and 2 devices it trained one process and the
    record said two. So: SLURM's only when SLURM started a task per process, else Lightning's own launcher; and
    never Lightning's SLURM auto-requeue, which a user's --signal=USR1 would turn into a requeue of the whole sweep
    job."""
    from lightning.fabric.plugins.environments import LightningEnvironment, SLURMEnvironment, TorchElasticEnvironment

    world = setup.devices * num_nodes
    if TorchElasticEnvironment.detect():
        return None
    if world <= 1:  # one process: inside SLURM, Lightning's own environment (its SLURM one requeues on SIGUSR1)
        return LightningEnvironment() if "SLURM_JOB_ID" in os.environ else None
    # Lightning never requeues: under submitit, its signal handler (callbacks.PreemptionSignal.forward) does
    return SLURMEnvironment(auto_requeue=False) if slurm_made_the_ranks(world) else LightningEnvironment()


def patch_ddp_child_command() -> None:
    """Lightning relaunches `sys.argv` for each extra DDP process. Under a Hydra sweep that would rerun the
    whole sweep; relaunch this job alone instead: `python -m ffnbench.train <this job's overrides>` in its
    own run directory."""
    from lightning.fabric.strategies.launchers import subprocess_script

    def command(local_rank: int) -> tuple[list[str], str]:
        from hydra.core.hydra_config import HydraConfig
        from hydra.utils import get_original_cwd

        hc = HydraConfig.get()
        cmd = [sys.executable, "-m", "ffnbench.train", *hc.overrides.task,
               f'hydra.run.dir="{hc.runtime.output_dir}"', f"hydra.job.name=train_ddp_process_{local_rank}",
               "hydra.output_subdir=null"]
        return cmd, get_original_cwd()

    subprocess_script._hydra_subprocess_cmd = command
    # lightning.pytorch's launcher imports the function by name and calls its own reference: patch that one too
    from lightning.pytorch.strategies.launchers import subprocess_script as pytorch_launcher

    pytorch_launcher._hydra_subprocess_cmd = command
