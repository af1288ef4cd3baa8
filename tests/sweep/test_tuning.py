"""The lr-tuning stage: a judged run with optim.lr=tuned takes the lr its own tuning runs chose (the report's
best_lr rule), waits while any of them has no outcome, and a preset whose stages cannot work is refused."""

import json

import pytest
from fixtures.report.synthetic import make_record

from ffnbench.errors import ConfigError
from ffnbench.runs.result import RESULT_FILE
from ffnbench.sweep.tuning import TUNED, TuningRun, check_tuning, choose_lr, tuning_group, with_lr


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


# ---- the robust protocol: grid checks and bracketing -------------------------------------------------------------

def robust(**extra):
    return {"robust": True, "min_lrs": 5, "min_seeds": 2, "bracket_cap": 2, **extra}


def grid(tmp_path, losses: dict[float, tuple], act="gelu", seeds=(100, 101)):
    """Tuning runs of one variant: {lr: one loss per seed} (None: not run yet)."""
    return [tuning_run(tmp_path, act, s, lr, loss) for lr, ls in losses.items() for s, loss in zip(seeds, ls)]


def jobs_of(runs):
    return {t.run_dir: [f"ffn={t.config['ffn']['act']}", f"seed={t.config['seed']}", "tuning=true",
                        f"optim.lr={t.config['optim']['lr']!r}"] for t in runs}


def test_a_choice_at_the_upper_edge_extends_the_grid_by_one_half_octave_step_on_the_same_seeds(tmp_path):
    from ffnbench.sweep.tuning import extension

    runs = grid(tmp_path, {0.001: (3.3, 3.3), 0.00141: (3.2, 3.2), 0.002: (3.1, 3.1)})
    judged = {**config("gelu"), "lr_protocol": robust()}
    assert extension(judged, runs, jobs_of(runs), 0) == [
        ["ffn=gelu", "seed=100", "tuning=true", "optim.lr=0.00283"],
        ["ffn=gelu", "seed=101", "tuning=true", "optim.lr=0.00283"]]
    assert extension(judged, runs, jobs_of(runs), 2) == []  # the cap reached: judged where it is
    assert extension({**judged, "lr_protocol": robust(bracket_cap=0)}, runs, jobs_of(runs), 0) == []
    down = grid(tmp_path, {0.001: (3.0, 3.0), 0.00141: (3.2, 3.2), 0.002: (3.1, 3.1)}, act="relu")
    assert [j[-1] for j in extension(config("relu") | {"lr_protocol": robust()}, down, jobs_of(down), 0)] == \
        ["optim.lr=0.000707"] * 2


def test_a_bracketed_or_undecided_choice_extends_nothing(tmp_path):
    from ffnbench.sweep.tuning import extension

    inside = grid(tmp_path, {0.001: (3.3, 3.3), 0.00141: (3.0, 3.0), 0.002: (3.1, 3.1)})
    judged = {**config("gelu"), "lr_protocol": robust()}
    assert extension(judged, inside, jobs_of(inside), 0) == []
    # the top lr diverged on both seeds: the wall brackets the optimum from above
    walled = [*grid(tmp_path, {0.001: (3.3, 3.3), 0.00141: (3.0, 3.0)}, act="relu"),
              *(tuning_run(tmp_path, "relu", s, 0.002, None, "diverged") for s in (100, 101))]
    assert extension(config("relu") | {"lr_protocol": robust()}, walled, jobs_of(walled), 0) == []
    waiting = grid(tmp_path, {0.001: (3.3, 3.3), 0.002: (3.1, None)}, act="swish")
    assert extension(config("swish") | {"lr_protocol": robust()}, waiting, jobs_of(waiting), 0) == []


@pytest.mark.parametrize("losses, protocol, match", [
    ({x: (3.0, 3.0) for x in (0.001, 0.002, 0.004)}, robust(), "its tuning grid has 3 lrs .* at least 5 spaced ×√2"),
    ({x: (3.0,) for x in (0.001, 0.00141, 0.002, 0.00283, 0.004)}, robust(),
     "its tuning grid has 1 seed at each lr .* at least 2"),
])
def test_a_robust_preset_refuses_a_thin_grid_before_any_run(tmp_path, losses, protocol, match):
    runs = grid(tmp_path, losses, seeds=(100, 101)[:len(next(iter(losses.values())))])
    with pytest.raises(ConfigError, match=match):
        check_tuning([({**config("gelu"), "lr_protocol": protocol}, "gelu-s0")], runs)
    check_tuning([(config("gelu"), "gelu-s0")], runs)  # without the robust protocol: no minimum


def test_lrs_on_different_seeds_and_protocol_values_out_of_range_are_refused(tmp_path):
    from ffnbench.claims.lr_protocol import LrProtocol

    runs = [*grid(tmp_path, {x: (3.0, 3.0) for x in (0.001, 0.00141, 0.002, 0.00283)}),
            tuning_run(tmp_path, "gelu", 102, 0.004, 3.0), tuning_run(tmp_path, "gelu", 103, 0.004, 3.0)]
    with pytest.raises(ConfigError, match="its tuning lrs ran on different seeds"):
        check_tuning([({**config("gelu"), "lr_protocol": robust()}, "gelu-s0")], runs)
    for bad, match in (({"bracket_cap": -1}, r"lr_protocol.bracket_cap: must be an integer ≥ 0, got -1 \(0: never"),
                       ({"min_lrs": 3}, "lr_protocol.min_lrs: must be an integer ≥ 5"),
                       ({"min_seeds": 1}, "lr_protocol.min_seeds: must be an integer ≥ 2"),
                       ({"robust": "yes"}, "lr_protocol.robust: expected true or false"),
                       ({"grid": 7}, "lr_protocol.grid: unknown setting")):
        with pytest.raises(ConfigError, match=match):
            LrProtocol.from_config(bad)


def test_a_robust_grid_off_the_half_octave_lattice_is_refused(tmp_path):
    runs = grid(tmp_path, {x: (3.0, 3.0) for x in (0.001, 0.00141, 0.002, 0.003, 0.004)})
    with pytest.raises(ConfigError, match=r"tuning lr 0.003 is not on the half-octave lattice .* use 0.002, 0.00283 or "
                                          r"0.004"):
        check_tuning([({**config("gelu"), "lr_protocol": robust()}, "gelu-s0")], runs)


def test_grids_and_extensions_name_the_same_rounded_lrs():
    from ffnbench.claims.lr_protocol import half_octave_grid, next_lr

    assert half_octave_grid(0.00141, 7) == [0.00141, 0.002, 0.00283, 0.004, 0.00566, 0.008, 0.0113]
    assert next_lr(0.0113, "up") == 0.016 and next_lr(0.016, "up") == 0.0226 and next_lr(0.00141, "down") == 0.001
    assert half_octave_grid(0.0005, 3) == [0.0005, 0.000707, 0.001] and next_lr(0.001, "down") == 0.000707
