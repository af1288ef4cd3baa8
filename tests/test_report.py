"""The report end to end on synthetic sweeps: sections, verdict lines, figures, tolerated and refused inputs,
rebuilding from results.jsonl, the command line, and the W&B path failing fast offline."""

import json
import re
import subprocess
import sys
import time

import pytest
from fixtures.report.synthetic import make_record, sweep_records, write_sweep

from ffnbench import report
from ffnbench.claims import CLAIM_IDS
from ffnbench.errors import FFNBenchError
from ffnbench.records import summary_key

SECTIONS = ("# ffnbench report", "## Claims", "## Results by comparison", "## Figures", "## Runs not used",
            "## Provenance")


def claims_section(text: str) -> str:
    return text[text.index("## Claims"):text.index("## Results by comparison")]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A sweep with every kind of run: 45 finished (all claims' data), one diverged, one failed, one running,
    one corrupt result.json and one listed run that never wrote a record."""
    root = tmp_path_factory.mktemp("sweep") / "synthetic"
    records = [*sweep_records(), make_record("relu", 0, None, lr=3e-2, status="diverged"),
               make_record("gelu", 0, None, lr=3e-2, status="failed"),
               make_record("swish", 0, None, lr=3e-2, status="running")]
    write_sweep(root, records, extra_runs=["never-started-s0", "corrupt-s0"])
    (root / "corrupt-s0").mkdir()
    (root / "corrupt-s0" / "result.json").write_text('{"status": "finished", "config": ')
    path = report.write_report(root, bench_files=[])
    return root, path.read_text()


def test_report_has_every_section_and_a_verdict_line_per_claim(sweep):
    _, text = sweep
    for heading in SECTIONS:
        assert heading in text, heading
    for cid in CLAIM_IDS:
        assert re.search(rf"^\| {cid} \| \*\*(supported|contradicted|inconclusive)\*\* \|", text, re.M), cid
        assert f"### {cid}: " in text
    assert "Paired differences vs **gelu-b4-nobias**" in text and "Minimal detectable effect" in text
    assert "Seeds needed to resolve 0.01 nats" in text and "make sweep EXP=synthetic" in text


def test_every_named_figure_exists_and_only_those(sweep):
    root, text = sweep
    named = set(re.findall(r"\]\(figures/([\w.]+\.png)\)", text))
    on_disk = {p.name for p in (root / "figures").glob("*.png")}
    assert named == on_disk and len(named) == 6
    assert all((root / "figures" / name).stat().st_size > 1000 for name in named)


def test_unusable_runs_are_listed_with_their_reason(sweep):
    root, text = sweep
    unused = text[text.index("## Runs not used"):text.index("## Provenance")]
    for needle in ("corrupt-s0 | corrupt | ", "never-started-s0 | missing | no result.json",
                   "| failed | failed: RuntimeError: out of memory", "| running | still running",
                   "| diverged | diverged: validation loss became nan"):
        assert needle in unused, needle
    lines = (root / "results.jsonl").read_text().splitlines()
    assert len(lines) == 46  # the finished runs and the diverged one
    assert "run_dir" not in json.loads(lines[0]) and "config" in json.loads(lines[0])


def test_report_rebuilt_from_its_results_jsonl_has_the_same_claims(sweep, tmp_path):
    root, text = sweep
    rebuilt = report.write_report(root / "results.jsonl", tmp_path / "published", bench_files=[]).read_text()
    assert claims_section(rebuilt) == claims_section(text)
    assert "make sweep EXP=synthetic" in rebuilt  # the sweep command travels with the report


def test_one_seed_sweep_has_no_intervals_and_no_trained_verdicts(tmp_path):
    root = write_sweep(tmp_path / "one", sweep_records(seeds=(0,)))
    text = report.write_report(root, bench_files=[]).read_text()
    assert "n/a (1 seed)" in text and "One seed only" in text
    for line in re.findall(r"^\| C\d+ \|.*$", claims_section(text), re.M):
        cid = line.split("|")[1].strip()
        if cid not in ("C2", "C10", "C11", "C12"):
            assert "**inconclusive**" in line, line


def test_mixed_configs_are_refused_naming_the_key(tmp_path):
    records = [make_record("gelu", s, 3.0) for s in (0, 1)]
    records += [make_record("relu", s, 3.1, config={"trainer.max_tokens": 2_000_000}) for s in (0, 1)]
    root = write_sweep(tmp_path / "mixed", records)
    with pytest.raises(FFNBenchError, match=r"mixed configs: .*trainer\.max_tokens.*relu-b4-nobias"):
        report.write_report(root)


def test_studied_factors_may_differ(tmp_path):
    records = [make_record("gelu", 0, 3.0, lr=1e-3, n_layer=4, bias=True, width=2),
               make_record("relu", 0, 3.1, config={"name": "other", "run_dir": "/elsewhere"})]
    report.check_poolable(report.load(write_sweep(tmp_path / "ok", records)).runs)


def test_same_variant_and_seed_twice(tmp_path):
    rec = make_record("gelu", 0, 3.0)
    path = tmp_path / "results.jsonl"
    path.write_text(json.dumps(rec) + "\n" + json.dumps({**rec, "run_name": "copy"}) + "\n")
    loaded = report.load(path)
    assert len(loaded.runs) == 1 and "duplicate of" in loaded.unused[0].reason
    other = make_record("gelu", 0, 3.0, config={"optim.weight_decay": 0.0})
    path.write_text(json.dumps(rec) + "\n" + json.dumps({**other, "run_name": "copy"}) + "\n")
    with pytest.raises(FFNBenchError, match=r"optim\.weight_decay"):
        report.load(path)


def test_empty_and_missing_inputs(tmp_path):
    with pytest.raises(FFNBenchError, match=r"no runs found.*make sweep"):
        report.write_report(tmp_path)
    (tmp_path / "results.jsonl").write_text("\n")
    with pytest.raises(FFNBenchError, match="empty"):
        report.write_report(tmp_path / "results.jsonl")


def test_latest_sweep_is_the_newest_manifest(tmp_path):
    for name, started in (("old", "2026-01-01T00:00:00+0000"), ("new", "2026-06-01T00:00:00+0000")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "sweep.json").write_text(json.dumps({"started_at": started, "runs": []}))
    assert report.latest_sweep(tmp_path).name == "new"
    with pytest.raises(FFNBenchError, match="make sweep"):
        report.latest_sweep(tmp_path / "nothing")


def test_cli_missing_directory_exits_2_with_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ffnbench.report", str(tmp_path / "nope")],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.startswith("ffnbench: error: ") and len(out.stderr.strip().splitlines()) == 1
    assert "make sweep" in out.stderr and "Traceback" not in out.stderr


def test_cli_writes_the_report(tmp_path, capsys):
    root = write_sweep(tmp_path / "s", [make_record(a, s, 3.0 + 0.01 * s) for a in ("relu", "gelu") for s in (0, 1)])
    report.main([str(root), "--out", str(tmp_path / "out")])
    assert (tmp_path / "out" / "REPORT.md").exists() and "REPORT.md" in capsys.readouterr().out


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
    started = time.monotonic()
    with pytest.raises(SystemExit) as exit_:
        report.main(["--wandb", "me/ffnbench"])
    assert exit_.value.code == 2 and time.monotonic() - started < 5
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_wandb_report_names_the_missing_package(monkeypatch, capsys):
    monkeypatch.setattr(report.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(SystemExit):
        report.main(["--wandb", "me/ffnbench", "--wandb-report"])
    assert "wandb-workspaces" in capsys.readouterr().err


class FakeWandbRun:
    """What wandb.Api().runs() yields, for a run logged by ffnbench.train (config = the resolved config,
    summary = train._summary's keys)."""

    def __init__(self, record):
        self.name, self.state, self.metadata = record["run_name"], "finished", {"git": {"commit": "abc"}}
        self.config = record["config"]
        m, s = record["metrics"], record["ffn_stats"]["final"]["mean"]
        self.summary = {**{summary_key(k): v for k, v in m.items()}, "status": "finished", "tokens": 7680,
                        "perf/tokens_per_s": 1000.0, "perf/mfu": 0.01, **{f"final/ffn_{k}": v for k, v in s.items()}}
        self.history = [{"trainer/global_step": p["step"], "val/loss": p["val_loss"], "val/bpb": p["val_bpb"]}
                        for p in record["curve"]]

    def scan_history(self, keys):
        return iter(self.history)


def test_a_wandb_run_maps_to_a_usable_record():
    rec = make_record("swiglu", 1, 3.0)
    run = report.classify(report.record_from_wandb(FakeWandbRun(rec)), rec["run_name"])
    assert isinstance(run, report.Run) and run.usable
    assert (run.act, run.seed, run.d_ff, run.ffn_params, run.loss) == ("swiglu", 1, rec["ffn"]["d_ff"],
                                                                       rec["ffn"]["params_per_layer"], 3.0)
    assert run.final["zero_frac"] == 0.0 and len(run.curve) == len(rec["curve"])


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

    monkeypatch.setattr(report, "check_wandb_online", lambda: None)  # the network part is tested above
    monkeypatch.setattr(wandb, "Api", FakeApi)
    report.main(["--wandb", "me/ffnbench", "--group", "synthetic", "--out", str(tmp_path)])
    text = (tmp_path / "REPORT.md").read_text()
    assert "loss(relu) − loss(gelu) = +0.0500 nats" in text and "--wandb me/ffnbench --group synthetic" in text


def test_sweep_json_with_paths_relative_to_where_the_sweep_ran(tmp_path, monkeypatch):
    root = write_sweep(tmp_path / "runs" / "exp", [make_record(a, s, 3.0 + 0.01 * s) for a in ("relu", "gelu")
                                                   for s in (0, 1)])
    manifest = json.loads((root / "sweep.json").read_text())
    manifest["runs"] = [f"runs/exp/{p.rsplit('/', 1)[1]}" for p in manifest["runs"]]  # as sweep.py writes them
    (root / "sweep.json").write_text(json.dumps(manifest))
    for cwd in (tmp_path, tmp_path / "runs"):  # the sweep's own cwd, and somewhere else
        monkeypatch.chdir(cwd)
        loaded = report.load(root)
        assert len(loaded.runs) == 4 and not loaded.unused
