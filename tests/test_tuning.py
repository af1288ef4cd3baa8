"""The lr-tuning stage: a judged run with optim.lr=tuned takes the lr its own tuning runs chose (the report's
best_lr rule), waits while any of them has no outcome, and a preset whose stages cannot work is refused."""

import json

import pytest
from fixtures.report.synthetic import make_record

from ffnbench.errors import ConfigError
from ffnbench.result import RESULT_FILE
from ffnbench.tuning import TUNED, TuningRun, check_tuning, choose_lr, tuning_group, with_lr


def config(act="gelu", seed=0, lr=TUNED, tuning=False, **extra):
    return {"seed": seed, "tuning": tuning, "ffn": {"act": act, "budget": 4}, "optim": {"lr": lr, "wd": 0.1},
            "model": {"d_model": 32, **extra}, "run_dir": f"/x/{act}-{seed}"}


def tuning_run(tmp_path, act, seed, lr, loss=None, status="finished"):
    run_dir = tmp_path / f"{act}-lr{lr}-s{seed}"
    if loss is not None or status != "finished":
        run_dir.mkdir()
        record = make_record(act, seed=seed, loss=loss, lr=lr, status=status, config={"tuning": True})
        (run_dir / RESULT_FILE).write_text(json.dumps(record))
    return TuningRun(config(act, seed, lr, tuning=True), run_dir)


def test_a_judged_run_takes_the_lr_with_the_lowest_mean_tuning_loss_of_its_own_variant(tmp_path):
    runs = [tuning_run(tmp_path, "gelu", s, lr, loss) for s in (100, 101)
            for lr, loss in ((1e-3, 3.0 + s / 1e3), (2e-3, 2.9), (4e-3, 2.95))]
    runs += [tuning_run(tmp_path, "relu", s, lr, loss) for s in (100, 101) for lr, loss in ((1e-3, 2.5), (2e-3, 2.8))]
    choice = choose_lr(config("gelu"), runs)
    assert (choice.lr, choice.waiting, len(choice.runs)) == (2e-3, 0, 6)
    assert choose_lr(config("relu"), runs).lr == 1e-3
    assert choice.describe() == "lr 0.002 chosen on 6 tuning runs"


def test_the_tuning_group_differs_only_in_lr_seed_and_the_tuning_flag(tmp_path):
    runs = [tuning_run(tmp_path, "gelu", 100, 1e-3, 3.0)]
    assert tuning_group(config("gelu", seed=7), runs) == runs
    assert tuning_group(config("gelu", n_layer=8), runs) == []  # another model: another group
    assert tuning_group({**config("gelu"), "optim": {"lr": TUNED, "wd": 0.0}}, runs) == []


def test_a_judged_run_waits_while_a_tuning_run_has_no_outcome(tmp_path):
    runs = [tuning_run(tmp_path, "gelu", 100, 1e-3, 3.0), tuning_run(tmp_path, "gelu", 100, 2e-3),
            tuning_run(tmp_path, "gelu", 101, 2e-3, status="running")]
    choice = choose_lr(config("gelu"), runs)
    assert choice.lr is None and choice.waiting == 2 and choice.describe() == "waits for 2 of 3 tuning runs"


def test_an_lr_where_a_tuning_seed_diverged_does_not_win(tmp_path):
    runs = [tuning_run(tmp_path, "gelu", 100, 4e-3, 2.0), tuning_run(tmp_path, "gelu", 101, 4e-3, None, "diverged"),
            tuning_run(tmp_path, "gelu", 100, 1e-3, 3.0), tuning_run(tmp_path, "gelu", 101, 1e-3, 3.1)]
    assert choose_lr(config("gelu"), runs).lr == 1e-3


def test_a_variant_whose_tuning_runs_all_diverged_is_blocked_and_says_why(tmp_path):
    runs = [tuning_run(tmp_path, "gelu", 100, lr, None, "diverged") for lr in (1e-2, 2e-2)]
    choice = choose_lr(config("gelu"), runs)
    assert choice.lr is None and choice.waiting == 0
    assert choice.describe() == ("every one of its 2 tuning runs diverged: no lr to judge it at; add smaller lrs to "
                                 "its tuning grid")


def test_stages_that_cannot_work_are_refused(tmp_path):
    runs = [tuning_run(tmp_path, "gelu", 100, 1e-3, 3.0)]
    with pytest.raises(ConfigError, match=r"relu-s0: optim.lr=tuned but no tuning run has its config"):
        check_tuning([(config("relu"), "relu-s0")], runs)
    with pytest.raises(ConfigError, match="seed 100 is used by its tuning runs too; give the tuning grid seeds"):
        check_tuning([(config("gelu", seed=100), "gelu-s100")], runs)
    check_tuning([(config("gelu", seed=0), "gelu-s0"), (config("relu", lr=1e-3), "relu-s0")], runs)


def test_the_chosen_lr_replaces_the_placeholder_exactly():
    assert with_lr(["ffn=gelu", "optim.lr=tuned", "seed=0"], 0.002) == ["ffn=gelu", "seed=0", "optim.lr=0.002"]
    assert with_lr(["ffn=gelu"], 1 / 3) == ["ffn=gelu", f"optim.lr={1 / 3!r}"]
