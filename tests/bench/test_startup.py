"""ffnbench.bench.startup: the step-time marks a training run writes when asked, and one quick run's record."""

import json

from ffnbench.bench import startup

from .checks import check_record, check_summary


def test_step_times_are_off_unless_asked(monkeypatch, tmp_path):
    from ffnbench.training.callbacks import STEP_TIMES_ENV, StepTimes

    monkeypatch.delenv(STEP_TIMES_ENV, raising=False)
    assert StepTimes.from_env() is None
    monkeypatch.setenv(STEP_TIMES_ENV, str(tmp_path / "marks.jsonl"))
    marks = StepTimes.from_env()
    marks.mark("train_start")
    marks.mark("train_start")  # each event once
    lines = [json.loads(line) for line in (tmp_path / "marks.jsonl").read_text().splitlines()]
    assert [m["event"] for m in lines] == ["train_start"] and lines[0]["time"] > 0


def test_quick_startup(quick_run):
    data = check_record(quick_run("startup"))
    (row,) = data["rows"]
    assert row["what"] == "csv"
    check_summary(row["to_first_step_s"], n=1)
    events = row["events_s"]
    assert set(events) == set(startup.STARTUP_EVENTS)
    order = [events[e]["median"] for e in startup.STARTUP_EVENTS]
    assert order == sorted(order)  # train() starts, data ready, first step starts, ends, process exits
    assert [r["what"] for r in data["data"]] == ["first tokenization in a fresh process (one-time imports included)",
                                                 "tokenization (empty cache)", "cached load (verify + memory-map)"]
    for r in data["data"]:
        check_summary(r["seconds"], n=1)
