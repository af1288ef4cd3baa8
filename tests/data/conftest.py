"""Fixtures of the data tests."""

import pytest


@pytest.fixture(autouse=True)
def hf_cache(tmp_path, monkeypatch):
    """`datasets` writes its arrow conversions of local files under tmp, not the user's HF cache."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf")
