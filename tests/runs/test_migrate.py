"""Records, configs and checkpoints of earlier versions, read in today's form: every published record migrates to
today's schema and compares as the run it was; a config that did not store its device resolved trained on a CPU;
a config of today is left as it is; a checkpoint's fingerprint and loop counts are made ready to resume from."""

import copy
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ffnbench.config.compose import compose
from ffnbench.config.identity import flatten, identity_diff, identity_key, with_hardware
from ffnbench.fileio import CorruptRecord
from ffnbench.runs.migrate import CONFIG_DEFAULTS, SCHEMA, migrate_checkpoint, migrate_config, migrate_record
from ffnbench.runs.result import RunResult

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
PUBLISHED = sorted(EXPERIMENTS.glob("*/results.jsonl"))
CPU = {"accelerator": "cpu", "precision": "32-true"}


def today(*overrides: str) -> dict:
    """A config of today as a CPU run stores it (run_config.json, result.json)."""
    return with_hardware(OmegaConf.to_container(compose(list(overrides)), resolve=True), "cpu", "32-true")


def test_a_config_of_today_is_left_as_it_is():
    for config in (today(), today("ffn=swiglu", "model.init=fan_in", "tuning=true"),
                   with_hardware(today(), "gpu", "bf16-mixed")):
        assert migrate_config(config) == config
    assert migrate_record({"status": "finished", "schema": SCHEMA, "config": {}}) == \
        {"status": "finished", "schema": SCHEMA, "config": {}}  # a record of today's schema takes no step


def test_a_config_that_does_not_store_its_device_resolved_trained_on_a_cpu_in_fp32():
    for then in ({"trainer": {"accelerator": "auto", "precision": "auto"}}, {"trainer": {}}, {},
                 {"trainer": {"accelerator": "cpu"}}, {"trainer": {"precision": 32}}, {"trainer": {"precision": "32"}}):
        trainer = migrate_config(then)["trainer"]
        assert {k: trainer[k] for k in CPU} == CPU, then
    assert migrate_config({"trainer": {"accelerator": "cuda", "precision": "bf16"}})["trainer"] == \
        {"accelerator": "gpu", "precision": "bf16-mixed", "deterministic": False}  # Lightning's names, as stored
    assert migrate_config({"trainer": {"accelerator": "gpu"}})["trainer"].get("precision") is None  # not known
    old = migrate_config({"trainer": {"accelerator": "auto", "precision": "auto"}})
    assert set(identity_diff(old, with_hardware(old, "gpu", "bf16-mixed"))) == {"trainer.accelerator",
                                                                                "trainer.precision"}


def test_a_key_a_config_lacks_is_what_it_meant_then():
    config = {"trainer": {"deterministic": True}, "model": {"init": "fan_in"}}
    migrated = migrate_config(config)
    assert config == {"trainer": {"deterministic": True}, "model": {"init": "fan_in"}}  # a copy
    flat = flatten(migrated)
    assert flat["trainer.deterministic"] is True and flat["model.init"] == "fan_in"  # what it says stays
    assert {k: flat[k] for k in CONFIG_DEFAULTS if k not in ("trainer.deterministic", "model.init")} == \
        {k: v for k, v in CONFIG_DEFAULTS.items() if k not in ("trainer.deterministic", "model.init")}
    assert identity_diff(migrate_config({"trainer": {"deterministic": True}}), migrate_config({"trainer": {}})) == {
        "trainer.deterministic": (True, False)}


def test_a_record_from_before_init_qk_norm_and_z_loss_is_the_same_run_as_todays_default():
    now = today()
    before = {**now, "model": {k: v for k, v in now["model"].items() if k not in ("init", "qk_norm")},
              "optim": {k: v for k, v in now["optim"].items() if k != "z_loss"}}
    assert "init" in now["model"] and "z_loss" in now["optim"]
    before = migrate_config(before)
    assert identity_diff(before, now) == {} and identity_key(before) == identity_key(now)
    for override, key, then, changed in (("model.init=fan_in", "model.init", "gpt2", "fan_in"),
                                         ("model.qk_norm=true", "model.qk_norm", False, True),
                                         ("optim.z_loss=1e-4", "optim.z_loss", 0.0, 1e-4)):
        other = today(override)
        assert identity_diff(before, other) == {key: (then, changed)}, override
        assert identity_key(before) != identity_key(other), override


@pytest.mark.parametrize("path", PUBLISHED, ids=lambda p: p.parent.name)
def test_every_published_record_migrates_to_todays_schema_changing_only_its_config(path):
    for i, line in enumerate(path.read_text().splitlines(), 1):
        then = json.loads(line)
        now = migrate_record(then)
        assert now["schema"] == SCHEMA
        assert {k: v for k, v in now.items() if k not in ("schema", "config")} == \
            {k: v for k, v in then.items() if k not in ("schema", "config")}, i
        old, new = flatten(then["config"]), flatten(now["config"])
        assert set(CONFIG_DEFAULTS) <= set(new) and set(old) <= set(new), i
        changed = {k for k in old if old[k] != new[k]}
        assert changed <= {"trainer.accelerator", "trainer.precision"}, (i, changed)
        assert (new["trainer.accelerator"], new["trainer.precision"]) == ("cpu", "32-true"), i
        assert migrate_record(now) == now and migrate_config(now["config"]) == now["config"]  # once is enough


def test_a_record_of_no_schema_version_is_refused():
    with pytest.raises(CorruptRecord, match="^here: schema 0 is no schema version"):
        RunResult.from_json({"status": "finished", "schema": 0}, "here")
    assert RunResult.from_json({"status": "finished"}).config == {}  # no config: none to complete
    assert RunResult.from_json({"status": "finished", "config": {"trainer": {}}}).config["trainer"] == \
        {**CPU, "deterministic": False}


def _loops(automatic: int, manual: int, batches: int) -> dict:
    step = lambda n: {"total": {"ready": n, "completed": n}, "current": {"ready": n, "completed": n}}
    progress = lambda n: {part: {"ready": n, "completed": n, "started": n, "processed": n}
                          for part in ("total", "current")}
    return {"loops": {"fit_loop": {
        "epoch_loop.batch_progress": {**progress(batches), "is_last_batch": False},
        "epoch_loop.automatic_optimization.optim_progress": {"optimizer": {"step": step(automatic)}},
        "epoch_loop.manual_optimization.optim_step_progress": step(manual)}}}


def _counts(checkpoint: dict) -> tuple[int, int]:
    loop = checkpoint["loops"]["fit_loop"]
    return (loop["epoch_loop.manual_optimization.optim_step_progress"]["total"]["completed"],
            loop["epoch_loop.batch_progress"]["current"]["ready"])


@pytest.mark.parametrize(("checkpoint", "inner_steps", "expected"), [
    (_loops(automatic=40, manual=0, batches=40), 5, (40, 8)),  # automatic optimization: a step a batch, elsewhere
    (_loops(automatic=43, manual=0, batches=43), 5, (43, 8)),  # stopped mid-batch: batch 8 is taken again from 43
    (_loops(automatic=0, manual=43, batches=9), 5, (43, 8)),  # batch 9 was under way (Ctrl-C): it is not done
    (_loops(automatic=0, manual=40, batches=8), 5, (40, 8)),  # a batch's end: unchanged
    (_loops(automatic=0, manual=40, batches=4), 10, (40, 4)),
])
def test_a_checkpoints_loop_counts_agree_with_its_step(checkpoint, inner_steps, expected):
    migrate_checkpoint(checkpoint, inner_steps)
    assert _counts(checkpoint) == expected
    batches = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]
    assert batches["total"] == batches["current"] == dict.fromkeys(("ready", "completed", "started", "processed"),
                                                                   expected[1])


def test_a_checkpoints_fingerprint_is_read_in_todays_form():
    checkpoint = {**_loops(automatic=40, manual=0, batches=40),
                  "ffnbench": {"fingerprint": {"trainer": {"accelerator": "auto", "precision": "auto"}}}}
    migrate_checkpoint(checkpoint)  # no inner_steps: the batch counts are left as they are
    assert _counts(checkpoint) == (40, 40)
    assert checkpoint["ffnbench"]["fingerprint"] == migrate_config({"trainer": {}})
    current = {"ffnbench": {"fingerprint": today()}}
    migrated = copy.deepcopy(current)
    migrate_checkpoint(migrated)
    assert migrated == current


def test_a_schema_2_record_without_init_gain_reads_as_gain_1_and_groups_with_todays_runs():
    """model.init_gain came after schema 2: an earlier fan_in record reads with gain 1.0, so it shares its setting
    with a run of today (claims.runs.Run.setting), instead of sitting in a cell of its own (gain None)."""
    from ffnbench.claims.runs import Run

    then = json.loads(next(line for line in (EXPERIMENTS / "cpu-robust" / "results.jsonl").open()
                           if '"init": "fan_in"' in line and '"init_gain"' not in line))
    assert then["schema"] == 2
    now = RunResult.from_json(then)
    assert now.config["model"]["init_gain"] == 1.0
    assert dict(Run.from_result(now).setting)["model.init_gain"] == 1.0
