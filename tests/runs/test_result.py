"""RunResult: the published records load in today's schema and then round-trip byte for byte, bad records are
refused with their reason, and a training run's record is built from what it measured (metrics, curve, counts)
exactly."""

import json
import math
from pathlib import Path

import pytest

from ffnbench.fileio import CorruptRecord
from ffnbench.model.ffn import FFNSpec
from ffnbench.model.model import ModelConfig
from ffnbench.placement import DeviceSetup
from ffnbench.runs.result import RESULT_FILE, SCHEMA, RunResult

PUBLISHED = Path(__file__).resolve().parents[2] / "experiments" / "cpu-quick" / "results.jsonl"


def published_lines() -> list[str]:
    return PUBLISHED.read_text().splitlines(keepends=True)


def test_every_published_line_loads_in_todays_schema_and_then_round_trips_byte_for_byte():
    lines = published_lines()
    assert len(lines) == 17
    for i, line in enumerate(lines):
        today = RunResult.from_json(json.loads(line), f"line {i + 1}").jsonl_line()
        assert json.loads(today)["schema"] == SCHEMA
        assert RunResult.from_json(json.loads(today), f"line {i + 1}").jsonl_line() == today, f"line {i + 1}"


def test_a_record_survives_write_and_read(tmp_path):
    record = RunResult.from_json(json.loads(published_lines()[0])).replace(run_dir=str(tmp_path))
    path = record.write(tmp_path)
    assert path == tmp_path / RESULT_FILE
    assert RunResult.read(tmp_path) == record
    assert list(json.loads(path.read_text()))[:3] == ["schema", "status", "error"]  # the schema leads the file
    assert RunResult.read(tmp_path / "elsewhere") is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"status": "done"}, "no valid 'status' (got 'done')"),
        ({"error": "x"}, "no valid 'status' (got None)"),
        ({"status": "finished", "schema": SCHEMA + 1}, f"schema {SCHEMA + 1} is newer"),
        ({"status": "finished", "schema": "1"}, "schema '1' is newer"),
        (["finished"], "expected a JSON object, found list"),
    ],
)
def test_bad_records_are_refused_with_their_reason(data, message):
    with pytest.raises(CorruptRecord, match=f"^here: .*{message.replace('(', '[(]').replace(')', '[)]')}"):
        RunResult.from_json(data, "here")


def test_an_unreadable_result_file_is_corrupt(tmp_path):
    (tmp_path / RESULT_FILE).write_text("{not json")
    with pytest.raises(CorruptRecord, match="unreadable"):
        RunResult.read(tmp_path)


def test_metrics_and_summary():
    record = RunResult.from_json({"status": "diverged", "metrics": {"final_val_loss": None, "best_val_loss": 2.5},
                                  "ffn_stats": None, "tokens": 10})
    assert record.final and record.ffn_stats == {}  # a null block loads as empty
    assert record.metric("final_val_loss") is None and record.metric("best_val_loss") == 2.5
    assert record.metric("nope") is None
    summary = record.wandb_summary()
    assert summary["final/val_loss"] is None and summary["final/best_val_loss"] == 2.5
    assert summary["status"] == "diverged" and summary["tokens"] == 10
    assert not RunResult("failed").final


def validation(step: int, loss: float, zero: float) -> dict:
    stats = {"mean": {"zero_frac": zero}, "per_layer": [{"zero_frac": zero}]}
    return {"step": step, "tokens": step * 64, "val_loss": loss, "val_bpb": loss / math.log(2), "ffn": stats}


def test_from_training_reads_the_history_as_documented():
    model = ModelConfig(vocab_size=256, seq_len=8, d_model=16, n_layer=1, n_head=2, ffn=FFNSpec("relu", budget=4))
    config = {"name": "exp", "seed": 3, "model": {"name": "micro"}}
    history = [validation(0, 5.5, 0.5), validation(10, 3.0, 0.6), validation(20, float("nan"), 0.7)]
    record = RunResult.from_training(
        "diverged", error="validation loss became nan at step 20", config=config, run_dir=Path("/runs/exp/r-s3"),
        model=model, history=history, last_train_loss=2.9, steps=20, tokens_per_step=64, total_steps=100,
        resumed_from=10, data={"source": "x", "val_bytes_per_token": 1.0}, throughput={"tokens_per_s": 1.0},
        device_setup=DeviceSetup("cpu", 1, "32-true", "auto"), started=0.0)
    assert (record.name, record.run_name, record.run_dir, record.seed) == ("exp", "r-s3", "/runs/exp/r-s3", 3)
    assert record.metrics["final_train_loss"] == 2.9
    assert math.isnan(record.metrics["final_val_loss"])  # the last validation, as it was
    assert record.metrics["best_val_loss"] == 3.0 and record.metrics["init_val_loss"] == 5.5
    assert record.metrics["best_val_bpb"] == 3.0 / math.log(2)
    assert record.ffn_stats == {"init": history[0]["ffn"], "final": history[2]["ffn"]}
    assert [c["step"] for c in record.curve] == [0, 10, 20] and set(record.curve[0]) == {"step", "tokens", "val_loss",
                                                                                          "val_bpb"}
    assert (record.steps, record.tokens, record.total_steps, record.resumed_from_step) == (20, 1280, 100, 10)
    assert record.flops["total_training"] == record.flops["per_token_training"] * 1280
    assert record.model == {"name": "micro", "d_model": 16, "n_layer": 1, "n_head": 2, "seq_len": 8,
                            "vocab_size": 256, "ffn_init": "gpt2", "init": "gpt2", "qk_norm": False,
                            "non_embedding_params_target": None,
                            "non_embedding_mismatch": None}
    assert record.val_windows is None and "val_windows" not in record.to_json()  # no final set: not written
    assert record.ffn["d_ff"] == 64 and record.ffn["label"] == "relu-b4-nobias"
    assert record.hardware["accelerator"] == "cpu" and record.hardware["precision"] == "32-true"
    on_disk = record.to_json()
    assert on_disk["metrics"]["final_val_loss"] is None and on_disk["curve"][2]["val_loss"] is None  # NaN → null


def test_from_training_without_a_validation_has_no_metrics():
    model = ModelConfig(vocab_size=256, seq_len=8, d_model=16, n_layer=1, n_head=2)
    record = RunResult.from_training(
        "failed", error="RuntimeError: boom", config={"name": "e", "seed": 0, "model": {}}, run_dir=Path("/r"),
        model=model, history=[], last_train_loss=None, steps=0, tokens_per_step=64, total_steps=10,
        resumed_from=None, data={}, throughput={}, device_setup=DeviceSetup("cpu", 1, "32-true", "auto"), started=0.0)
    assert set(record.metrics.values()) == {None}
    assert record.ffn_stats == {"init": None, "final": None} and record.curve == [] and record.tokens == 0


def test_the_final_set_gives_the_final_metrics_and_the_per_window_losses():
    model = ModelConfig(vocab_size=256, seq_len=8, d_model=16, n_layer=1, n_head=2, ffn=FFNSpec("gelu", budget=4),
                        ffn_init="matched")
    last = {**validation(20, 3.0, 0.6), "final": {"val_loss": 2.95, "val_bpb": 2.95 / math.log(2) / 1.5,
                                                   "windows": [2.5, 3.0, 3.35]}}
    config = {"name": "e", "seed": 0, "model": {"name": "micro", "non_embedding_params": 3000}}
    record = RunResult.from_training(
        "finished", error=None, config=config, run_dir=Path("/r"), model=model,
        history=[validation(0, 5.5, 0.5), last], last_train_loss=2.9, steps=20,
        tokens_per_step=64, total_steps=20, resumed_from=None, data={}, throughput={},
        device_setup=DeviceSetup("cpu", 1, "32-true", "auto"), started=0.0)
    assert record.metrics["final_val_loss"] == 2.95 and record.metrics["final_val_bpb"] == 2.95 / math.log(2) / 1.5
    assert record.metrics["best_val_loss"] == 3.0  # the curve is the periodic set's
    assert record.curve[-1] == {"step": 20, "tokens": 1280, "val_loss": 3.0, "val_bpb": 3.0 / math.log(2)}
    assert record.val_windows == [2.5, 3.0, 3.35]
    non_embedding = record.params["non_embedding"]
    assert record.model["ffn_init"] == "matched" and record.model["non_embedding_params_target"] == 3000.0
    assert record.model["non_embedding_mismatch"] == (non_embedding - 3000) / 3000
    line = record.jsonl_line()
    assert list(json.loads(line))[-3:] == ["val_windows", "train_curve", "instabilities"]  # new fields go last
    assert RunResult.from_json(json.loads(line)).jsonl_line() == line
