"""A run's processes: the ranks read from the environment, the DDP child command, the cluster environment Lightning
is given, and what a DDP launch leaves behind."""

import os

import pytest

from ffnbench import ddp
from ffnbench.ddp import global_rank, local_rank
from ffnbench.placement import DeviceSetup


def test_ranks_come_from_torchrun_or_slurm(monkeypatch):
    for name in ("LOCAL_RANK", "RANK", "SLURM_LOCALID", "SLURM_PROCID"):
        monkeypatch.delenv(name, raising=False)
    assert (local_rank(), global_rank()) == (0, 0)
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("SLURM_PROCID", "5")
    assert (local_rank(), global_rank()) == (1, 5)
    monkeypatch.setenv("LOCAL_RANK", "2")
    monkeypatch.setenv("RANK", "6")
    assert (local_rank(), global_rank()) == (2, 6)


def test_a_rank_lightning_spawned_inside_an_interactive_slurm_task_is_not_rank_zero(monkeypatch):
    """`srun --pty bash`, then a 2-GPU run: Lightning spawns rank 1 itself, which inherits SLURM_PROCID=0 from the
    one task; it must read its own LOCAL_RANK/NODE_RANK (else it thinks it is rank 0, finds the run lock held and
    skips, and rank 0 hangs at process-group init)."""
    for name in ("LOCAL_RANK", "RANK", "SLURM_LOCALID", "NODE_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE", "SLURM_NNODES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_LOCALID", "0")
    assert global_rank() == 0  # the task itself: rank 0
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("NODE_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert (local_rank(), global_rank()) == (1, 1)
    monkeypatch.setenv("NODE_RANK", "1")  # the second node of a 2-node, 4-rank run Lightning spawned per node
    monkeypatch.setenv("SLURM_NNODES", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert global_rank() == 3


def test_the_ddp_child_command_is_ours_in_both_of_lightnings_launchers():
    """lightning.pytorch's launcher imports _hydra_subprocess_cmd by name: patching only fabric's module left it
    calling Lightning's own, which reruns the whole `-m` sweep in every extra rank."""
    from lightning.fabric.strategies.launchers import subprocess_script as fabric
    from lightning.pytorch.strategies.launchers import subprocess_script as pytorch

    from ffnbench.ddp import patch_ddp_child_command

    before = (fabric._hydra_subprocess_cmd, pytorch._hydra_subprocess_cmd)
    try:
        patch_ddp_child_command()
        assert pytorch._hydra_subprocess_cmd is fabric._hydra_subprocess_cmd
        assert pytorch._hydra_subprocess_cmd.__module__ == "ffnbench.ddp"
    finally:
        fabric._hydra_subprocess_cmd, pytorch._hydra_subprocess_cmd = before


# ---- the cluster environment and what a DDP launch leaves behind ------------------------------------------------

SLURM_ONE_TASK = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "sweep", "SLURM_NODELIST": "localhost", "SLURM_JOB_ID": "123",
                  "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NNODES": "1"}


@pytest.mark.parametrize(("env", "devices", "expected"), [
    (SLURM_ONE_TASK, 2, "LightningEnvironment"),  # sbatch -n1, joblib inside: the run spawns its ranks
    ({**SLURM_ONE_TASK, "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "2"}, 2, "SLURMEnvironment"),  # srun: SLURM made
    # them
    ({}, 2, "LightningEnvironment"),
    (SLURM_ONE_TASK, 1, "LightningEnvironment"),  # one process in an allocation: never Lightning's SLURM requeue
    ({}, 1, None),
    ({"TORCHELASTIC_RUN_ID": "x", "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "GROUP_RANK": "0",
      "MASTER_ADDR": "localhost", "MASTER_PORT": "1234"}, 2, None),  # torchrun: Lightning detects it
])
def test_the_cluster_environment_makes_the_ranks_slurm_did_not(monkeypatch, env, devices, expected):
    for key in (*SLURM_ONE_TASK, "SLURM_NTASKS_PER_NODE", "TORCHELASTIC_RUN_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                "GROUP_RANK"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    chosen = ddp.cluster_environment(DeviceSetup("cpu", devices, "32-true", "ddp" if devices > 1 else "auto"))
    assert (type(chosen).__name__ if chosen is not None else None) == expected
    if expected == "SLURMEnvironment":
        assert chosen.auto_requeue is False  # the whole sweep job must not requeue on a user's SIGUSR1


def test_a_ddp_scope_restores_the_environment_and_destroys_the_process_group_it_made(monkeypatch, tmp_path):
    import torch.distributed as dist

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setenv("MASTER_PORT", "29999")
    with ddp.ddp_scope():
        for key, value in (("LOCAL_RANK", "0"), ("NODE_RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_PORT", "1")):
            os.environ[key] = value  # as Lightning's launcher writes them, behind monkeypatch's back
        dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
        assert dist.is_initialized()
    assert not dist.is_initialized()
    assert "LOCAL_RANK" not in os.environ and "NODE_RANK" not in os.environ and "WORLD_SIZE" not in os.environ
    assert os.environ["MASTER_PORT"] == "29999"  # what was there before is put back
