"""ffnbench.report.load: reading a sweep directory or a results.jsonl, sorting records into usable runs and
reasons, and refusing what may not be pooled."""

import json

import pytest
from fixtures.report.synthetic import make_record, write_sweep

from ffnbench.claims import Run
from ffnbench.errors import FFNBenchError
from ffnbench.report.load import Unused, check_poolable, classify, latest_sweep, load
from ffnbench.runs.result import RunResult


def test_classify_sorts_each_status():
    def of(status, **changes):
        return classify(RunResult.from_json({**make_record("gelu", 0, None, status=status), **changes}), "r")

    assert of("running", steps=3, total_steps=30) == Unused("r", "running", "still running (step 3 of 30)")
    assert of("failed") == Unused("r", "failed", "failed: RuntimeError: out of memory")
    nan_loss = of("finished")  # finished, but no finite final loss: a divergence the module missed
    assert isinstance(nan_loss, Run) and nan_loss.diverged and not nan_loss.usable
    assert of("finished", ffn={}).reason == "incomplete record (KeyError: 'act')"
    diverged = of("diverged")
    assert isinstance(diverged, Run) and not diverged.usable and diverged.result.status == "diverged"


def test_bad_lines_of_a_results_jsonl_are_listed_and_the_rest_loads(tmp_path):
    good = [make_record(a, 0, 3.0) for a in ("relu", "gelu")]
    bad = ["{not json", "[1, 2]", json.dumps({"status": "done"}), json.dumps({**good[0], "schema": 99})]
    path = tmp_path / "results.jsonl"
    path.write_text("\n".join([json.dumps(good[0]), *bad, "", json.dumps(good[1])]) + "\n")
    loaded = load(path)
    assert sorted(r.act for r in loaded.runs) == ["gelu", "relu"]
    assert [(u.run, u.status) for u in loaded.unused] == [(f"results.jsonl:{i}", "corrupt") for i in (2, 3, 4, 5)]
    reasons = [u.reason for u in loaded.unused]
    assert reasons[0].startswith("line 2: invalid JSON") and reasons[1] == "line 3: expected a JSON object, found list"
    assert reasons[2] == "line 4: no valid 'status' (got 'done')" and "schema 99 is newer" in reasons[3]


def test_mixed_configs_are_refused_naming_the_key(tmp_path):
    records = [make_record("gelu", s, 3.0) for s in (0, 1)]
    records += [make_record("relu", s, 3.1, config={"trainer.max_tokens": 2_000_000}) for s in (0, 1)]
    root = write_sweep(tmp_path / "mixed", records)
    with pytest.raises(FFNBenchError, match=r"mixed configs: .*trainer\.max_tokens: .* vs 2000000 "
                                            r"\(relu-b4-nobias-lr0.003-L2-s0, relu-b4-nobias-lr0.003-L2-s1\)"):
        load(root)


def test_one_off_runs_that_differ_in_many_settings_are_refused_in_one_short_line_with_the_fix(tmp_path):
    """runs/default/ collects one-off runs: each differs from the others in several settings with long values."""
    records = [make_record("gelu", 0, 3.0)]
    records += [make_record("relu", s, 3.1, config={"trainer.max_tokens": 2_000_000 + s, "data.path": "/x/" * 40 + "a",
                                                    "optim.warmup_steps": 7 + s,
                                                    "data.batch_size": 9 + s}) for s in range(6)]
    with pytest.raises(FFNBenchError) as refused:
        load(write_sweep(tmp_path / "default", records))
    message = str(refused.value)
    assert "\n" not in message and len(message) <= 500, (len(message), message)
    assert message.startswith("mixed configs: ") and "and 2 more settings" in message
    assert message.endswith("give them their own name=... (runs/<name>/) and report that folder")


def test_an_interrupted_run_is_not_used_and_says_it_resumes(tmp_path):
    record = make_record("gelu", 0, 3.0)
    record.update(status="interrupted", error="stopped by Ctrl-C at step 25; checkpoint at step 20 (x): rerun the same "
                                                "command to resume")
    unused = classify(RunResult.from_json(record), "gelu-s0")
    assert isinstance(unused, Unused) and unused.status == "interrupted"
    assert unused.reason.startswith("stopped by Ctrl-C at step 25")


def test_studied_factors_may_differ(tmp_path):
    records = [make_record("gelu", 0, 3.0, lr=1e-3, n_layer=4, bias=True, width=2),
               make_record("relu", 0, 3.1, config={"name": "other", "run_dir": "/elsewhere"})]
    loaded = load(write_sweep(tmp_path / "ok", records))
    check_poolable(loaded.runs)
    assert len(loaded.runs) == 2 and not loaded.unused


def test_same_variant_and_seed_twice(tmp_path):
    rec = make_record("gelu", 0, 3.0)
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(rec) + "\n" + json.dumps({**rec, "run_name": "copy"}) + "\n")
    loaded = load(path)
    assert len(loaded.runs) == 1 and loaded.unused[0].reason == f"duplicate of {loaded.runs[0].name} (same variant, " \
                                                                 "seed and config)"
    other = make_record("gelu", 0, 3.0, config={"optim.weight_decay": 0.0})
    path.write_text(json.dumps(rec) + "\n" + json.dumps({**other, "run_name": "copy"}) + "\n")
    with pytest.raises(FFNBenchError, match=r"optim\.weight_decay"):
        load(path)


def test_empty_and_missing_inputs(tmp_path):
    with pytest.raises(FFNBenchError, match=r"no runs found.*make sweep"):
        load(tmp_path)
    (tmp_path / "results.jsonl").write_text("\n")
    with pytest.raises(FFNBenchError, match="empty"):
        load(tmp_path / "results.jsonl")
    with pytest.raises(FFNBenchError, match="no such sweep directory"):
        load(tmp_path / "nope")


def test_latest_sweep_is_the_newest_manifest(tmp_path):
    for name, started in (("old", "2026-01-01T00:00:00+0000"), ("new", "2026-06-01T00:00:00+0000")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "sweep.json").write_text(json.dumps({"started_at": started, "runs": []}))
    assert latest_sweep(tmp_path).name == "new"
    with pytest.raises(FFNBenchError, match="make sweep"):
        latest_sweep(tmp_path / "nothing")


def test_sweep_json_with_paths_relative_to_where_the_sweep_ran(tmp_path, monkeypatch):
    root = write_sweep(tmp_path / "runs" / "exp", [make_record(a, s, 3.0 + 0.01 * s) for a in ("relu", "gelu")
                                                   for s in (0, 1)])
    manifest = json.loads((root / "sweep.json").read_text())
    manifest["runs"] = [f"runs/exp/{p.rsplit('/', 1)[1]}" for p in manifest["runs"]]  # as sweep.py writes them
    (root / "sweep.json").write_text(json.dumps(manifest))
    for cwd in (tmp_path, tmp_path / "runs"):  # the sweep's own cwd, and somewhere else
        monkeypatch.chdir(cwd)
        loaded = load(root)
        assert len(loaded.runs) == 4 and not loaded.unused


def test_a_sweep_without_sweep_json_is_found_by_its_result_files(tmp_path):
    root = write_sweep(tmp_path / "s", [make_record(a, 0, 3.0) for a in ("relu", "gelu")])
    (root / "sweep.json").unlink()
    loaded = load(root)
    assert sorted(r.act for r in loaded.runs) == ["gelu", "relu"] and loaded.manifest is None
