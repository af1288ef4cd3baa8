"""W&B (offline): a resumed run keeps its wandb id, plots against tokens, and logs every key the report plots."""

import json

import pytest
from micro_runs import StopAt, micro
from wandb_files import read_run, run_files

from ffnbench.report import wandb as report_wandb
from ffnbench.train import train
from ffnbench.training.loggers import WANDB_RUN_FILE


def test_wandb_run_resumes_under_its_id_plots_against_tokens_and_has_the_report_keys(cache_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    run_dir, overrides = tmp_path / "wb", ["logger=wandb", "ffn=swiglu"]
    with pytest.raises(RuntimeError, match="stopped at step 25"):  # rows up to step 24 logged, checkpoint at 20
        train(micro(cache_dir, run_dir, *overrides), callbacks=[StopAt(25)])
    result = train(micro(cache_dir, run_dir, *overrides))
    assert result.resumed_from_step == 20 and result.status == "finished"
    first, resumed = (read_run(f) for f in run_files(run_dir))
    # one wandb run, in two parts: `wandb sync` appends the second to the first
    assert first["id"] == resumed["id"] == json.loads((run_dir / WANDB_RUN_FILE).read_text())["id"]
    assert resumed["group"] == "default"
    assert {"act:swiglu", "budget:4", "bias:off", "size:micro", "seed:0"} <= set(resumed["tags"])
    assert json.loads(resumed["config"]["ffn"])["act"] == "swiglu"  # the report groups by config.ffn.act
    assert json.loads(resumed["summary"]["final/val_loss"]) == pytest.approx(result.metrics["final_val_loss"])
    assert json.loads(resumed["summary"]["status"]) == "finished"
    # tokens is the x-axis of the training, validation and FFN metrics
    assert all(resumed["metrics"][glob] == "tokens" for glob in ("train/*", "val/*", "ffn/*"))
    rows = first["history"] + resumed["history"]
    # every validation row carries tokens, at the step result.json gives it (the final validation repeats the last)
    validation = [(r["trainer/global_step"], r["tokens"]) for r in rows if "val/loss" in r]
    curve = [(c["step"], c["tokens"]) for c in result.curve]
    assert validation == [*curve, curve[-1]]
    # the steps retrained after the checkpoint (20-24) are not logged a second time
    assert [r["trainer/global_step"] for r in rows if "train/loss" in r] == list(range(4, 40, 5))
    # every key the W&B report plots is one the run logged
    assert report_wandb.report_keys() <= set(resumed["summary"]) | {key for row in rows for key in row}
