"""ffnbench.bench.overhead: one quick run's record (the GPU-sized row, the profile, Lightning's floor), and the
window sizes of every model it can time."""

import pytest

from ffnbench.bench import overhead

from .checks import check_record, check_summary


def test_quick_overhead_ratio(quick_run):
    record = check_record(quick_run("overhead"))
    (row,) = record["rows"]  # the GPU-sized step alone (at --quick sizes it is micro, at whatever batch it took)
    sizes = overhead.SIZES["quick"]
    assert sizes.models == ()
    assert (row["model"], row["gpu_sized"]) == ("micro", True)  # the only candidate at --quick sizes
    assert (row["warmup_steps"], row["window_steps"], row["windows"]) == sizes.steps["micro"]
    windows = row["windows"]
    for key in ("hand_tokens_per_s", "pipeline_tokens_per_s", "ratio", "hand_ms_per_step"):
        check_summary(row[key], n=windows)
    assert len(row["raw"]["hand"]) == len(row["raw"]["pipeline"]) == windows
    ratios = sorted(p / h for p, h in zip(row["raw"]["pipeline"], row["raw"]["hand"]))
    assert row["ratio"]["median"] == pytest.approx(sum(ratios) / 2)  # the paired ratio, not a ratio of medians
    # the hand loop trained exactly what the pipeline trained, alternating with it in one process
    assert row["final_train_loss"]["hand"] == row["final_train_loss"]["pipeline"]
    check_summary(row["val_stats_ratio"], n=max(3, sizes.reps))
    assert row["meets_goal"] is (row["ratio"]["median"] >= 0.95)
    # the only preset at --quick sizes (at a smaller batch too, on a machine too slow for 2-10 ms at the user's)
    assert all(label.startswith("micro") for label in record["settings"]["gpu_sized_candidates_ms"])
    prof = record["profile"]
    assert prof["model"] == "micro" and prof["steps"] == sizes.profile_steps
    assert prof["batch_size"] == row["batch_size"]  # profiled at the GPU-sized row's batch
    assert prof["pipeline_calls_per_step"] > prof["hand_calls_per_step"] > 0 and prof["top_beyond_hand"]
    assert any(note.startswith("profile after") for note in record["notes"])
    floor = record["lightning_floor"]
    assert floor["steps"] == sizes.floor_steps and floor["hand"]["n"] == floor["lightning"]["n"] > 0
    assert floor["extra_ms_per_step"]["median"] == floor["lightning"]["median"] - floor["hand"]["median"]
    assert any(note.startswith("Lightning's own loop") for note in record["notes"])


@pytest.mark.parametrize("sizes_of", ["quick", "cpu", "gpu"])
def test_every_model_the_overhead_benchmark_can_time_has_its_window_sizes(sizes_of):
    # compare() unpacks (warm-up, steps per window, windows) for the GPU-sized candidates and the other rows alike,
    # so every size preset must give those three numbers for each of them (gpu-check's: test_gpucheck.py).
    sizes = overhead.SIZES[sizes_of]
    for model in (*sizes.gpu_sized, *sizes.models):
        warmup, window, windows = sizes.steps[model]
        assert warmup >= 1 and window >= 1 and windows >= 2, (model, sizes.steps[model])
