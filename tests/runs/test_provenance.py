"""Provenance: the git revision's dirty flag, and the machine record a run's `hardware` block holds."""

import os
import subprocess

from ffnbench.runs.provenance import git_revision, machine_record, versions


def git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


def test_the_dirty_flag_counts_untracked_files(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git(tmp_path, "add", "a.py")
    git(tmp_path, "commit", "-q", "-m", "one")
    assert git_revision(tmp_path)["dirty"] is False
    (tmp_path / "new_module.py").write_text("y = 2\n")  # not committed, not ignored: the code that ran differs
    assert git_revision(tmp_path)["dirty"] is True
    (tmp_path / ".gitignore").write_text("new_module.py\n.gitignore\n")  # what git ignores is not the code
    assert git_revision(tmp_path)["dirty"] is False
    (tmp_path / "a.py").write_text("x = 3\n")
    assert git_revision(tmp_path)["dirty"] is True


def test_the_machine_record_names_the_gpu_software_and_the_matmul_precision():
    import torch

    info = machine_record("cpu")
    assert info["float32_matmul_precision"] == torch.get_float32_matmul_precision()
    assert {"driver", "cudnn"} <= set(info)  # None here: no NVIDIA driver, a CPU build of torch
    assert "triton" in versions()
