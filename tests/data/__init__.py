"""Tests of ffnbench.data, one file per module of the package (the data module's own tests with the corpus
they run on)."""
