"""experiments/cpu-robust/snapshot.py: what a snapshot publishes from the campaign's run directory — finished runs,
added to the published lines without rewriting one, and never part of an arm still under way."""

import importlib.util
import json
from pathlib import Path

import pytest
from fixtures.report.synthetic import make_record

SCRIPT = Path(__file__).parents[1] / "experiments" / "cpu-robust" / "snapshot.py"


def _snapshot(out: Path):
    spec = importlib.util.spec_from_file_location("snapshot", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.HERE = out
    return module


def _run(runs: Path, name: str, seed: int, status: str = "finished") -> None:
    (runs / name).mkdir(parents=True)
    record = make_record("relu", seed, 3.0, status=status)
    record["run_name"] = name
    (runs / name / "result.json").write_text(json.dumps(record))


def _published(out: Path) -> list[str]:
    return [json.loads(line)["run_name"] for line in (out / "results.jsonl").read_text().splitlines()]


def test_an_arm_under_way_is_held_back_whole_and_published_once_it_ends(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    out.mkdir()
    _run(runs, "arm1-a", 0)
    _run(runs, "arm2-a", 1)  # the latest sweep's: one finished, one still training, one not started
    _run(runs, "arm2-b", 2, status="running")
    (runs / "sweep.json").write_text(json.dumps({"runs": [f"runs/x/{n}" for n in ("arm2-a", "arm2-b", "arm2-c")]}))
    snapshot = _snapshot(out)
    snapshot.main(runs)
    assert _published(out) == ["arm1-a"]
    line = (out / "results.jsonl").read_text()
    for name, seed in (("arm2-b", 2), ("arm2-c", 3)):  # the arm ends
        (runs / name).mkdir(exist_ok=True)
        record = make_record("relu", seed, 3.0)
        record["run_name"] = name
        (runs / name / "result.json").write_text(json.dumps(record))
    snapshot.main(runs)
    assert _published(out) == ["arm1-a", "arm2-a", "arm2-b", "arm2-c"]
    assert (out / "results.jsonl").read_text().startswith(line)  # the published line stays as it was
    assert json.loads((out / "sweep.json").read_text())["runs"][0] == "runs/cpu_robust/arm1-a"


def test_a_failed_run_holds_nothing_back_a_run_never_made_does_until_asked(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "out"
    out.mkdir()
    _run(runs, "arm-a", 0)
    _run(runs, "arm-b", 1, status="failed")  # campaign.sh retries it: the arm has ended for now
    (runs / "sweep.json").write_text(json.dumps({"runs": ["runs/x/arm-a", "runs/x/arm-b"]}))
    snapshot = _snapshot(out)
    snapshot.main(runs)
    assert _published(out) == ["arm-a"]
    _run(runs, "arm2-a", 2)  # the next arm: one of its judged runs was never made (no lr to judge it at)
    (runs / "sweep.json").write_text(json.dumps({"runs": ["runs/x/arm2-a", "runs/x/arm2-judged"]}))
    snapshot.main(runs)
    assert _published(out) == ["arm-a"]
    snapshot.main(runs, with_unfinished_arm=True)
    assert _published(out) == ["arm-a", "arm2-a"]


def test_nothing_to_publish_is_an_error_that_writes_nothing(tmp_path, capsys):
    runs, out = tmp_path / "runs", tmp_path / "out"
    out.mkdir()
    _run(runs, "arm-a", 0)
    (runs / "sweep.json").write_text(json.dumps({"runs": ["runs/x/arm-a", "runs/x/arm-b"]}))
    with pytest.raises(SystemExit) as exit_:
        _snapshot(out).main(runs)
    assert exit_.value.code == 2 and "no finished run to publish" in capsys.readouterr().err
    assert not (out / "results.jsonl").exists()



def test_help_prints_the_usage_and_an_unknown_option_is_one_line_and_exit_2(tmp_path):
    import subprocess
    import sys

    def run(*args):
        return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=tmp_path)

    shown = run("--help")
    assert shown.returncode == 0 and "--with-unfinished-arm" in shown.stdout and not list(tmp_path.iterdir())
    wrong = run("--with-unfinshed-arm")
    assert wrong.returncode == 2 and wrong.stdout == ""
    assert wrong.stderr == ("snapshot.py: unknown option --with-unfinshed-arm; usage: python "
                            "experiments/cpu-robust/snapshot.py [runs/cpu_robust] [--with-unfinished-arm]\n")
