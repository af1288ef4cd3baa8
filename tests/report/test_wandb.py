"""ffnbench.report.wandb: a W&B run mapped to a RunResult, a report built from a W&B project, and the W&B path
failing fast and clearly where it cannot work."""

from types import SimpleNamespace

import pytest
from fixtures.report.synthetic import make_record

from ffnbench import report
from ffnbench.claims import Run
from ffnbench.report import wandb as report_wandb
from ffnbench.runs.migrate import SCHEMA
from ffnbench.runs.result import RunResult


@pytest.mark.parametrize(("env", "needle"), [({"WANDB_MODE": "offline"}, "WANDB_MODE=offline"),
                                             ({"WANDB_API_KEY": None}, "no W&B credentials"),
                                             ({"WANDB_API_KEY": "x" * 40}, "unreachable")])
def test_wandb_fails_fast_and_clearly_offline(monkeypatch, tmp_path, capsys, no_network, env, needle):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc credentials
    monkeypatch.delenv("WANDB_MODE", raising=False)
    for key, value in env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    monkeypatch.setattr("wandb.Api", lambda *a, **k: pytest.fail("the W&B API was called"))
    with pytest.raises(SystemExit) as exit_:
        report.main(["--wandb", "me/ffnbench"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_wandb_report_names_the_missing_package(monkeypatch, capsys):
    monkeypatch.setattr(report_wandb.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(report_wandb, "load_wandb", lambda *a: pytest.fail("runs loaded before the package check"))
    with pytest.raises(SystemExit):
        report.main(["--wandb", "me/ffnbench", "--wandb-report"])
    assert "wandb-workspaces" in capsys.readouterr().err


class FakeWandbRun:
    """What wandb.Api().runs() yields for a run logged by ffnbench.train: config = the resolved config,
    summary = RunResult.wandb_summary(), history = the validation points."""

    def __init__(self, record):
        self.name, self.state, self.metadata = record["run_name"], "finished", {"git": {"commit": "abc"}}
        self.config = record["config"]
        self.summary = RunResult.from_json(record).wandb_summary()
        self.history = [{"trainer/global_step": p["step"], "val/loss": p["val_loss"], "val/bpb": p["val_bpb"]}
                        for p in record["curve"]]
        self.history.append(dict(self.history[-1]))  # the final validation logs the last step's point again

    def scan_history(self, keys):
        return iter(self.history)


def test_a_wandb_run_maps_to_a_run_result():
    rec = make_record("swiglu", 1, 3.0)
    result = report_wandb.record_from_wandb(FakeWandbRun(rec))
    assert isinstance(result, RunResult) and result.schema == SCHEMA and result.git == {"revision": "abc"}
    expected = RunResult.from_json(rec)  # the record as read: its config in today's form
    for block in ("ffn", "params", "metrics", "curve", "config"):
        assert getattr(result, block) == getattr(expected, block), block  # sizes recomputed from the config agree
    assert result.ffn_stats["final"]["mean"] == rec["ffn_stats"]["final"]["mean"] and result.ffn_stats["init"] is None
    assert RunResult.from_json(result.to_json()) == result  # it round-trips as any record
    run = Run.from_result(result)
    assert run.usable and (run.act, run.seed, run.loss) == ("swiglu", 1, 3.0)


def test_a_wandb_run_state_gives_the_status_when_the_summary_has_none():
    run = FakeWandbRun(make_record("relu", 0, 3.0))
    del run.summary["status"]
    run.state = "crashed"
    assert report_wandb.record_from_wandb(run).status == "failed"


def test_report_from_a_wandb_project(monkeypatch, tmp_path):
    import wandb

    runs = [FakeWandbRun(make_record(act, s, 3.0 + 0.05 * (act == "relu") + 0.01 * s))
            for act in ("relu", "gelu") for s in (0, 1)]

    class FakeApi:
        def __init__(self, timeout=None):
            pass

        def runs(self, path, filters=None):
            assert path == "me/ffnbench" and filters == {"group": "synthetic"}
            return runs

    monkeypatch.setattr(report_wandb, "check_wandb_online", lambda: None)  # the network part is tested above
    monkeypatch.setattr(wandb, "Api", FakeApi)
    report.main(["--wandb", "me/ffnbench", "--group", "synthetic", "--out", str(tmp_path)])
    text = (tmp_path / "REPORT.md").read_text()
    assert "loss(relu) − loss(gelu) = +0.0500 nats" in text and "--wandb me/ffnbench --group synthetic" in text
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 4


def test_the_wandb_report_plots_the_panels_of_its_spec(monkeypatch):
    # wandb-workspaces stood in for by a recorder: every panel the report builds names the keys of REPORT_PANELS
    # (which the training test checks against a real run's history and summary), and none other.
    import sys
    import types

    built = []

    def recorder(kind):
        def make(**kwargs):
            built.append((kind, kwargs))
            return SimpleNamespace(kind=kind, url="https://wandb.ai/me/ffnbench/reports/x", save=lambda: None, **kwargs)
        return make

    wr = types.ModuleType("wandb_workspaces.reports.v2")
    for kind in ("Runset", "Report", "PanelGrid", "LinePlot", "ScatterPlot", "BarPlot", "MarkdownBlock"):
        setattr(wr, kind, recorder(kind))
    wr.H1 = lambda text: SimpleNamespace(kind="H1")
    for name in ("wandb_workspaces", "wandb_workspaces.reports"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "wandb_workspaces.reports.v2", wr)
    monkeypatch.setattr(report_wandb, "require_workspaces", lambda: None)
    report_wandb.create_wandb_report("me/ffnbench", "quick", [])
    keys = set()
    for kind, kwargs in built:
        if kind in ("LinePlot", "ScatterPlot", "BarPlot"):
            y = kwargs.get("y")
            keys |= {kwargs.get("x"), *(y if isinstance(y, list) else [y]), *kwargs.get("metrics", [])} - {None}
    assert keys == report_wandb.report_keys() and "final/val_loss" in keys
    assert [k for k, kw in built if k == "Runset"] and built[0][1]["groupby"] == ["config.ffn.act"]
