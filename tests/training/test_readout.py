"""ffnbench.training.readout: values read as `.item()` reads them, in order, without a read on the device's queue."""

import pytest
import torch

from ffnbench.training.readout import DEFER_ENV, Readout, defers


def test_a_readout_reads_each_tensor_exactly_as_item_does():
    values = {"loss": torch.tensor(2.718281828, dtype=torch.float32), "bf16": torch.tensor(1 / 3, dtype=torch.bfloat16),
              "steps": torch.tensor(2**40, dtype=torch.int64), "inf": torch.tensor(float("inf")),
              "lr": 0.003, "later": lambda: 7.5, "absent": lambda: None, "none": None}
    read = Readout(values).read()
    assert read == {"loss": values["loss"].item(), "bf16": values["bf16"].item(), "steps": 2**40,
                    "inf": float("inf"), "lr": 0.003, "later": 7.5}
    assert list(read) == ["loss", "bf16", "steps", "inf", "lr", "later"]  # the order given, None left out


def test_a_readout_copies_at_once_so_a_later_change_does_not_show():
    loss = torch.tensor(1.0)
    row = Readout({"loss": loss})
    loss.add_(1.0)  # the next step reuses the memory
    assert row.ready() and row.read() == {"loss": 1.0}


@pytest.mark.parametrize(("setting", "device", "expected"), [
    ("", "cpu", False), ("", "cuda", True), ("1", "cpu", True), ("0", "cuda", False)])
def test_reads_are_deferred_on_a_gpu_unless_told(monkeypatch, setting, device, expected):
    monkeypatch.setenv(DEFER_ENV, setting)
    assert defers(torch.device(device)) is expected
