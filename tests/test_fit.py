"""The lines a run prints (ffnbench.fit); fit_run itself trains in test_train.py and tests/integration."""

from pathlib import Path

from ffnbench.fit import finished_line, stopped_line, warmup_note


def test_a_run_shorter_than_its_warmup_is_the_only_one_told_so():
    assert warmup_note(50, 51) is None
    assert warmup_note(50, 50).startswith("optim.warmup_steps=50 is not shorter than the run (50 steps): the warmup "
                                          "is cut to 49 steps")
    assert "cut to 0 steps" in warmup_note(10, 1)


def test_the_last_line_rounds_the_losses_and_a_stop_says_where_it_resumes():
    assert finished_line("finished", {"final_val_loss": 2.659558157242941, "final_val_bpb": 3.83696}, Path("r.json")) \
        == "ffnbench: finished: val loss 2.6596, val bpb 3.8370 → r.json"
    assert finished_line("diverged", {"final_val_loss": None, "final_val_bpb": None}, Path("r.json")) \
        == "ffnbench: diverged: val loss None, val bpb None → r.json"
    assert stopped_line("Ctrl-C", 23, 20, Path("c/last.ckpt")) == \
        "stopped by Ctrl-C at step 23; checkpoint at step 20 (c/last.ckpt): rerun the same command to resume"
    assert stopped_line("SIGTERM", 3, None, Path("c/last.ckpt")) == \
        "stopped by SIGTERM at step 3; no checkpoint yet: rerun the same command to start it again"
