"""A sweep's time left: each run's planned FLOPs from its config, over the FLOP rate the sweep's finished runs
reached; the progress line a launched run prints."""

import json

from fixtures.report.synthetic import make_record

from ffnbench.config.compose import compose
from ffnbench.config.schema import model_config, reference_params, run_spec, to_container
from ffnbench.model.accounting import count_flops
from ffnbench.runs.result import RESULT_FILE
from ffnbench.runs.rundir import SWEEP_MANIFEST
from ffnbench.sweep.progress import SWEEP_ENV, estimate, planned_flops, progress_line


def test_planned_flops_are_flops_per_token_times_the_tokens_the_budget_gives():
    config = to_container(compose(["model=micro", "data.batch_size=4", "trainer.tokens_per_param=3"]))
    model = model_config(config, 256)
    tokens_per_step = 4 * 32
    steps = -(-3 * reference_params(config) // tokens_per_step)
    assert planned_flops(run_spec(config, 256), 4) == count_flops(model).training * steps * tokens_per_step


def _finished(tmp_path, name, flops, wall, status="finished", at="2026-12-01T10:00:00+0000"):
    run_dir = tmp_path / name
    run_dir.mkdir()
    record = make_record("gelu", status=status, loss=3.0 if status == "finished" else None)
    record.update(flops={**record["flops"], "per_token_training": flops / 100, "total_training": flops},
                  steps=100, tokens_per_step=1, resumed_from_step=None, wall_time_s=wall, finished_at=at)
    (run_dir / RESULT_FILE).write_text(json.dumps(record))
    return run_dir


def test_time_left_is_the_flops_left_at_the_rate_the_finished_runs_reached(tmp_path):
    runs = [(_finished(tmp_path, "a", 1e12, 100.0, at="2026-12-01T09:50:00+0000"), 1e12),
            (_finished(tmp_path, "b", 3e12, 300.0), 3e12),  # one after the other: 400 s of wall time
            (_finished(tmp_path, "c", 5e12, 1.0, status="diverged"), 5e12),  # done, but no rate from it
            (tmp_path / "d", 5e11), (tmp_path / "e", 2.5e12)]
    est = estimate(runs)
    assert (est.done, est.total, est.based_on, est.rate) == (3, 5, 2, 1e10)
    assert est.seconds_left == 300.0
    assert est.line() == ("3 of 5 runs done; about 5 min left (at the 10 GFLOP/s of wall time its 2 most "
                          "recently finished runs reached)")


def test_before_any_run_finishes_the_time_left_is_unknown(tmp_path):
    est = estimate([(tmp_path / "a", 1e12)])
    assert est.seconds_left is None
    assert est.line() == "0 of 1 runs done; time left: unknown until a run of this sweep finishes here"


def test_a_run_launched_by_a_sweep_prints_its_progress_line(tmp_path, monkeypatch):
    done = _finished(tmp_path, "a", 1e12, 100.0)
    (tmp_path / SWEEP_MANIFEST).write_text(json.dumps({"runs": [str(done), str(tmp_path / "b")],
                                                       "flops": [1e12, 7.2e13]}))
    monkeypatch.delenv(SWEEP_ENV, raising=False)
    assert progress_line() is None
    monkeypatch.setenv(SWEEP_ENV, str(tmp_path))
    assert progress_line() == ("sweep progress: 1 of 2 runs done; about 2.0 h left (at the 10 GFLOP/s of wall time "
                               "its 1 most recently finished run reached)")
    monkeypatch.setenv(SWEEP_ENV, str(tmp_path / "missing"))
    assert progress_line() is None


def test_a_resumed_runs_rate_counts_only_what_its_last_process_trained(tmp_path):
    """A run resumed at step 60 of 100 was timed (100 s) over its last 40 steps: 4e11 of its 1e12 FLOPs."""
    run_dir = _finished(tmp_path, "a", 1e12, 100.0)
    record = json.loads((run_dir / RESULT_FILE).read_text())
    (run_dir / RESULT_FILE).write_text(json.dumps({**record, "resumed_from_step": 60}))
    assert estimate([(run_dir, 1e12), (tmp_path / "b", 4e11)]).seconds_left == 100.0


def test_the_rate_is_that_of_the_most_recently_finished_runs(tmp_path):
    """Two runs that shared the cores with other work (10x slower) stop counting once ten runs finished after them:
    a campaign resumed on a quiet machine says what is left at the rate it trains now."""
    slow = [(_finished(tmp_path, f"slow{i}", 1e12, 1000.0, at=f"2026-12-01T08:{30 * i:02d}:00+0000"), 1e12)
            for i in range(2)]
    fast = [(_finished(tmp_path, f"fast{i}", 1e12, 100.0, at=f"2026-12-01T10:{2 * i:02d}:00+0000"), 1e12)
            for i in range(10)]
    est = estimate([*fast[:5], *slow, *fast[5:], (tmp_path / "left", 1e13)])  # the order of the manifest is not time
    assert (est.done, est.based_on, est.rate, est.seconds_left) == (12, 10, 1e10, 1000.0)
    assert estimate([*slow, fast[0], (tmp_path / "left", 1e13)]).rate == 3e12 / 2100.0  # fewer than ten: all of them


def test_recent_means_recent_in_time_whatever_the_time_zone_it_was_written_in(tmp_path):
    """10:30+01:00 is 09:30 UTC: before 10:00+00:00 although it sorts after it as text."""
    early = (_finished(tmp_path, "early", 1e12, 1000.0, at="2026-12-01T10:30:00+0100"), 1e12)
    later = [(_finished(tmp_path, f"later{i}", 1e12, 100.0, at=f"2026-12-01T10:{2 * i:02d}:00+0000"), 1e12)
             for i in range(10)]
    assert estimate([early, *later]).rate == 1e10


def test_runs_trained_side_by_side_count_as_a_parallel_sweep_and_a_pause_does_not_count(tmp_path):
    """Two joblib jobs of 100 s each, side by side, trained 2e12 FLOPs in 100 s of wall time: the sweep's rate is
    2e10 (each run's own is 1e10). A pause of an hour before the next pair is not training time."""
    pair = [(_finished(tmp_path, f"p{i}", 1e12, 100.0, at="2026-12-01T10:00:00+0000"), 1e12) for i in range(2)]
    assert estimate([*pair, (tmp_path / "left", 2e12)]).seconds_left == 100.0
    later = [(_finished(tmp_path, f"q{i}", 1e12, 100.0, at="2026-12-01T11:00:00+0000"), 1e12) for i in range(2)]
    assert estimate([*pair, *later, (tmp_path / "left", 2e12)]).rate == 2e10


def test_a_run_without_a_readable_end_time_counts_its_wall_time_alone(tmp_path):
    runs = [(_finished(tmp_path, "a", 1e12, 100.0, at=None), 1e12), (tmp_path / "left", 1e12)]
    assert estimate(runs).seconds_left == 100.0
