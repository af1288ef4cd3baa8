"""Loggers: wandb's mode follows the credentials and the route to W&B, a run's wandb id is its own, and a
resumed run's metrics.csv keeps its rows."""

import csv
import json
import shutil

import pytest

from ffnbench.errors import ConfigError
from ffnbench.model.ffn import FFNSpec
from ffnbench.training import loggers
from ffnbench.training.loggers import RunCSVLogger, make_loggers, resolve_wandb_mode, wandb_mode, wandb_tags


def login_with_netrc(home):
    (home / ".netrc").write_text("machine api.wandb.ai login user password secret\n")
    (home / ".netrc").chmod(0o600)


def test_wandb_is_offline_without_credentials(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(loggers, "unreachable", lambda host, port=443: None)  # the W&B host answers
    assert resolve_wandb_mode("auto") == "offline"
    login_with_netrc(tmp_path)
    assert resolve_wandb_mode("auto") == "online"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert resolve_wandb_mode(None) == "online"
    assert resolve_wandb_mode("offline") == "offline"
    with pytest.raises(ConfigError, match="logger.wandb.mode"):
        wandb_mode("sometimes")


def test_credentials_on_a_node_without_a_route_out_log_offline(monkeypatch, tmp_path, capsys):
    # A compute node that shares ~/.netrc with the login node but cannot reach the W&B host: wandb.init would
    # sit in its retries and time out, so the run logs offline and says how to upload it later.
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    login_with_netrc(tmp_path)
    probes = []

    def no_route(host, port=443):
        probes.append((host, port))
        return "OSError: [Errno 101] Network is unreachable"

    monkeypatch.setattr(loggers, "unreachable", no_route)
    assert resolve_wandb_mode("auto", tmp_path / "run") == "offline"
    assert probes == [("api.wandb.ai", 443)]
    err = capsys.readouterr().err
    assert "api.wandb.ai is unreachable" in err and f"wandb sync {tmp_path / 'run'}/wandb/offline-run-*" in err
    monkeypatch.setenv("WANDB_BASE_URL", "http://wandb.cluster.local:8080")  # a W&B server of one's own
    resolve_wandb_mode("auto")
    assert probes[-1] == ("wandb.cluster.local", 8080)
    assert resolve_wandb_mode("online") == "online"  # asked for: as asked, no probe
    assert len(probes) == 2


def test_a_recreated_run_directory_starts_a_new_wandb_run_and_a_resume_continues_it(tmp_path):
    run_dir = tmp_path / "gelu-b4-nobias-s0"
    config = {"name": "quick", "model": {"name": "tiny"}, "seed": 0}

    def wandb_id(resumed_from):
        [logger] = make_loggers({"wandb": {"mode": "offline"}}, run_dir, config, FFNSpec("gelu", budget=4),
                                resumed_from, True)
        return logger.version

    run_dir.mkdir()
    first = wandb_id(None)
    assert wandb_id(resumed_from=20) == first  # a resume appends to the same wandb run
    shutil.rmtree(run_dir)
    run_dir.mkdir()  # the same path, a new run: its history must not be mixed into the old run's
    second = wandb_id(None)
    assert second != first
    assert wandb_id(None) != second  # a fresh start over a failed one (no checkpoint) starts from step 0 again


def test_wandb_tags_say_the_ffn_size_and_seed():
    config = {"model": {"name": "tiny"}, "seed": 2}
    assert wandb_tags(config, FFNSpec("swiglu", budget=8 / 3, bias=True)) == [
        "act:swiglu", "budget:2.66667", "bias:on", "size:tiny", "seed:2"]
    assert wandb_tags({"model": {}, "seed": 0}, FFNSpec("relu", width=4))[1:4] == ["width:4", "bias:off", "size:custom"]


def rows(path):
    with path.open() as f:
        return list(csv.DictReader(f))


def test_a_resumed_run_keeps_its_rows_up_to_the_checkpoint(tmp_path):
    first = RunCSVLogger(tmp_path)
    for step in range(5):
        first.log_metrics({"train/loss": 5.0 - step}, step=step)
    first.log_metrics({"val/loss": 4.0}, step=4)
    first.save()
    resumed = RunCSVLogger(tmp_path, resume_step=2)  # the checkpoint was at step 2; steps 3-4 are redone
    resumed.log_metrics({"train/loss": 1.0, "lr": 0.1}, step=3)
    resumed.save()
    kept = rows(tmp_path / "metrics.csv")
    assert [r["step"] for r in kept] == ["0", "1", "2", "3"]
    assert set(kept[0]) == {"step", "train/loss", "val/loss", "lr"}  # old and new columns both kept


def test_a_fresh_run_starts_a_new_file(tmp_path):
    (tmp_path / "metrics.csv").write_text("step,train/loss\n0,9.0\n")
    logger = RunCSVLogger(tmp_path)
    logger.log_metrics({"train/loss": 1.0}, step=0)
    logger.save()
    assert rows(tmp_path / "metrics.csv") == [{"step": "0", "train/loss": "1.0"}]


def test_a_wandb_run_left_open_in_the_process_is_closed_not_continued(tmp_path):
    # The basic and joblib launchers train many runs in one process; wandb.init would hand back a run an earlier
    # run failed to close, and this run's metrics would land in it.
    import wandb

    stale = wandb.init(mode="offline", dir=str(tmp_path), project="ffnbench")
    run_dir = tmp_path / "relu-b4-nobias-s0"
    run_dir.mkdir()
    [logger] = make_loggers({"wandb": {"mode": "offline"}}, run_dir, {"name": "quick", "model": {}, "seed": 0},
                            FFNSpec("relu", budget=4), None, True)
    try:
        assert logger.experiment.id == logger.version != stale.id
        assert logger.experiment.dir.startswith(str(run_dir))
    finally:
        wandb.finish()


class SentToWandb:
    """What RunWandbLogger hands to wandb (Lightning's WandbLogger.log_metrics, stubbed: no wandb traffic), by row
    kind and step, and how often the run's wandb record is written."""

    def __init__(self, monkeypatch, run_dir):
        from lightning.pytorch.loggers import WandbLogger

        monkeypatch.setenv("WANDB_MODE", "offline")
        self.rows: list[tuple[str, int]] = []
        self.writes = 0
        self.run_dir = run_dir
        monkeypatch.setattr(WandbLogger, "log_metrics",
                            lambda logger, metrics, step=None: self.rows.append((loggers._row_kind(metrics), step)))
        monkeypatch.setattr(WandbLogger, "save", lambda logger: None)
        write = loggers.write_json_atomic

        def counted(path, *args, **kwargs):
            self.writes += path.name == loggers.WANDB_RUN_FILE
            return write(path, *args, **kwargs)

        monkeypatch.setattr(loggers, "write_json_atomic", counted)

    def start(self, resumed_from):
        record = loggers.wandb_run_record(self.run_dir, resumed_from)
        return loggers.RunWandbLogger(self.run_dir, record, project="p", mode="offline", save_dir=str(self.run_dir))


def _train(logger, steps, log_every, ckpt_every, stop=None):
    """Rows as a run logs them: a training row every log_every steps, and at every ckpt_every-th step a validation row
    (Lightning saves after it) and the checkpoint's save. `stop`: killed outright at that step (no save, no end)."""
    for step in steps:
        if step == stop:
            return
        if step % ckpt_every == 0 and step:
            logger.log_metrics({"val/loss": 1.0, "tokens": step}, step)
            logger.save()  # Lightning's, after its row
            logger.save()  # the checkpoint's
        if (step + 1) % log_every == 0:
            logger.log_metrics({"train/loss": 1.0 / (step + 1), "tokens": step + 1}, step)
    logger.finalize("success")


def test_the_wandb_record_is_written_at_checkpoints_not_at_every_row(tmp_path, monkeypatch):
    """The record (what a resume must not log twice) was rewritten at every logged row: a file close each, a server
    round trip on NFS. It is written at the start, when a save changed it, and at the end."""
    sent = SentToWandb(monkeypatch, tmp_path)
    logger = sent.start(None)
    _train(logger, range(1000), log_every=1, ckpt_every=250)
    assert sent.writes <= 1 + 1000 // 250 + 1  # start, the saves (each checkpoint), the end
    assert [step for kind, step in sent.rows if kind == "train"] == list(range(1000))  # every row sent, once
    record = json.loads((tmp_path / loggers.WANDB_RUN_FILE).read_text())
    assert record["logged"] == {"train": 999, "val": 750}


@pytest.mark.parametrize("killed_at", [23, 37])
def test_a_resume_after_a_checkpoint_logs_no_step_twice_and_loses_none(tmp_path, monkeypatch, killed_at):
    """Killed outright (no save, no end) at `killed_at`, after the checkpoint at step 20 or at 30, and resumed from
    it: the steps it trains again are not sent twice, and every row up to the checkpoint is sent."""
    sent = SentToWandb(monkeypatch, tmp_path)
    _train(sent.start(None), range(40), log_every=5, ckpt_every=10, stop=killed_at)
    checkpoint = killed_at // 10 * 10
    _train(sent.start(checkpoint), range(checkpoint, 40), log_every=5, ckpt_every=10)
    train = [step for kind, step in sent.rows if kind == "train"]
    assert train == list(range(4, 40, 5))  # each once, in order
    assert [step for kind, step in sent.rows if kind == "val"] == [10, 20, 30]


def test_a_run_leaves_out_lightnings_accelerator_banner_and_keeps_its_other_lines():
    """ "GPU available: False, used: False / TPU available: ..." on every run says nothing the run's own first line
    does not, and "`Trainer(val_check_interval=1)` was configured so validation will run after every batch" (a run
    whose val_every is one batch of inner_steps) counts batches where a run validates every val_every steps;
    Lightning's other rank-zero lines (`Trainer.fit` stopped: ...) stay."""
    import logging

    import lightning as L

    loggers.quiet_lightning()
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    rank_zero.addHandler(handler)
    try:
        L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                  val_check_interval=1)
        rank_zero.info("`Trainer.fit` stopped: `max_steps=1` reached.")
    finally:
        rank_zero.removeHandler(handler)
    assert not [m for m in seen if "available:" in m or "val_check_interval" in m]
    assert seen == ["`Trainer.fit` stopped: `max_steps=1` reached."]


def test_the_wandb_logger_does_not_pass_the_anonymous_setting_nobody_gave(tmp_path, monkeypatch):
    """wandb warns "The anonymous setting has no effect and will be removed" whenever wandb.init gets the key, even
    as None (which Lightning's WandbLogger passes)."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    logger = loggers.RunWandbLogger(tmp_path, loggers.wandb_run_record(tmp_path, None), project="p", mode="offline",
                                    save_dir=str(tmp_path))
    assert "anonymous" not in logger._wandb_init
    assert logger._wandb_init["project"] == "p"


def test_lightnings_sync_dist_advice_is_left_out_for_every_metric_the_module_logs():
    """Under DDP Lightning advises sync_dist=True once for each metric logged at epoch level; the module's (a
    validation record's step, tokens, val/*, ffn/*) are all-reduced before they are logged, so the advice is noise.
    The message as Lightning builds it (logger_connector/result.py); any other warning still shows."""
    import warnings

    from lightning.pytorch.utilities.rank_zero import WarningCache

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        loggers.quiet_lightning.__wrapped__()  # the filters, in this test's warnings context
        cache = WarningCache()
        for name in ("step", "tokens", "val/loss", "val/final_bpb", "ffn/zero_frac", "ffn/layer1/dead_frac"):
            cache.warn(f"It is recommended to use `self.log({name!r}, ..., sync_dist=True)` when logging on epoch "
                       "level in distributed setting to accumulate the metric across devices.")
        cache.warn("It is recommended to use `self.log('train/other', ..., sync_dist=True)` when logging on epoch "
                   "level in distributed setting to accumulate the metric across devices.")
    assert [str(w.message).split("`")[1] for w in seen] == ["self.log('train/other', ..., sync_dist=True)"]


def test_an_offline_wandb_run_ends_with_the_line_that_uploads_it(tmp_path, monkeypatch, capsys):
    """Without credentials (the common offline case) a run's wandb files stay on disk: finishing it prints the
    `wandb sync` command for its own folder, as docs/runs.md promises."""
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    wandb.init(project="ffnbench-test", dir=str(tmp_path), mode="offline")
    loggers.finish_wandb(0)
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("ffnbench: wandb: logged offline"))
    assert f"wandb sync {tmp_path}/wandb/offline-run-" in line, line
