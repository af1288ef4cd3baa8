"""Tests of ffnbench.bench, one file per module of the package."""
