"""Peak FLOP/s: the GPU table, and a CPU probe cache that keeps its best reading."""

import json

import pytest

from ffnbench import throughput
from ffnbench.throughput import cpu_peak_flops, gpu_peak_flops


@pytest.mark.parametrize(
    ("name", "precision", "peak"),
    [("NVIDIA H100 80GB HBM3", "bf16-mixed", 989e12), ("NVIDIA H100 PCIe", "bf16-mixed", 756e12),
     ("NVIDIA H200", "bf16-mixed", 989e12), ("NVIDIA A100-SXM4-80GB", "bf16-mixed", 312e12),
     ("NVIDIA A100-SXM4-80GB", "32-true", 156e12), ("NVIDIA L40S", "bf16-mixed", 362e12),
     ("NVIDIA A10G", "bf16-mixed", 70e12), ("Some Future GPU", "bf16-mixed", None)],
)
def test_gpu_table(name, precision, peak):
    assert gpu_peak_flops(name, precision) == peak


def test_cpu_probe_is_cached_and_keeps_the_best_reading(tmp_path, monkeypatch):
    readings = iter([100e9, 80e9, 120e9])
    monkeypatch.setattr(throughput, "measure_cpu_peak_flops", lambda seconds=1.0: next(readings))
    assert cpu_peak_flops(tmp_path) == 100e9
    assert cpu_peak_flops(tmp_path) == 100e9  # a busy machine reads low: the cache keeps the best
    assert cpu_peak_flops(tmp_path) == 120e9
    assert list(json.loads((tmp_path / "peak_flops.json").read_text()).values()) == [120e9]


def test_a_damaged_probe_cache_is_measured_again(tmp_path, monkeypatch):
    (tmp_path / "peak_flops.json").write_text("{broken")
    monkeypatch.setattr(throughput, "measure_cpu_peak_flops", lambda seconds=1.0: 50e9)
    assert cpu_peak_flops(tmp_path) == 50e9


def test_configured_peak_wins():
    assert throughput.peak_flops("cpu", "32-true", 1e12, None) == (1e12, "config (trainer.peak_flops)")
