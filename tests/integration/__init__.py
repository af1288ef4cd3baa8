"""End-to-end training runs: resume, signals and submitit, DDP, W&B, devices (tests of ffnbench.train's
units are in tests/test_train.py)."""
