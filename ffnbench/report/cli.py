"""The report's command line: `python -m ffnbench.report [SWEEP_DIR | results.jsonl] [--out DIR]
[--wandb ENTITY/PROJECT [--group NAME] [--wandb-report]]` (also `ffnbench report` and `make report`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import ffnbench.report.wandb as wandb_runs
from ffnbench.cli import user_errors_exit
from ffnbench.report.build import build, write_report
from ffnbench.report.load import RUNS_ROOT, latest_sweep
from ffnbench.runs.rundir import SWEEP_MANIFEST


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The arguments, with the combinations that make no sense refused by argparse (exit 2)."""
    parser = argparse.ArgumentParser(prog="ffnbench report", description="Statistics over seeds and a verdict per "
                                     "claim for a sweep: REPORT.md, results.jsonl and figures/*.png.")
    parser.add_argument("source", nargs="?", help="a sweep directory or a results.jsonl (default: the newest "
                                                  f"{RUNS_ROOT}/*/{SWEEP_MANIFEST})")
    parser.add_argument("--out", type=Path, help="where to write REPORT.md, results.jsonl and figures/")
    parser.add_argument("--wandb", metavar="ENTITY/PROJECT", help="read the runs from this W&B project")
    parser.add_argument("--group", help="with --wandb: only this group (the sweep's name)")
    parser.add_argument("--wandb-report", action="store_true", help="also create a W&B report (needs --wandb)")
    ns = parser.parse_args(argv)
    if ns.wandb and ns.source:
        parser.error("give a sweep directory/results.jsonl or --wandb, not both")
    if (ns.wandb_report or ns.group) and not ns.wandb:
        parser.error("--wandb-report and --group need --wandb ENTITY/PROJECT")
    if ns.wandb and "/" not in ns.wandb:
        parser.error("--wandb takes ENTITY/PROJECT")
    return ns


def from_wandb(ns: argparse.Namespace) -> None:
    """The report of a W&B project's runs (default folder: runs/wandb-<entity>-<project>[-<group>])."""
    if ns.wandb_report:
        wandb_runs.require_workspaces()  # before anything slow: a missing package is the first thing to say
    loaded = wandb_runs.load_wandb(ns.wandb, ns.group)
    name = f"wandb-{ns.wandb.replace('/', '-')}" + (f"-{ns.group}" if ns.group else "")
    report, results = build(loaded, ns.out or RUNS_ROOT / name,
                            f"--wandb {ns.wandb}" + (f" --group {ns.group}" if ns.group else ""))
    print(f"report: {report}")
    if ns.wandb_report:
        print(f"W&B report: {wandb_runs.create_wandb_report(ns.wandb, ns.group, results)}")


@user_errors_exit
def main(argv: list[str] | None = None) -> None:
    """Write the report; a user error is one line on stderr and exit status 2."""
    ns = parse_args(sys.argv[1:] if argv is None else argv)
    if ns.wandb:
        from_wandb(ns)
        return
    source = Path(ns.source) if ns.source else latest_sweep()
    print(f"report: {write_report(source, ns.out)}")
