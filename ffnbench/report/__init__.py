"""`python -m ffnbench.report [SWEEP_DIR | results.jsonl] [--out DIR]` (`make report SWEEP=dir`): the sweep's
runs → statistics over seeds → a verdict per claim → REPORT.md, results.jsonl and figures/*.png.

With no argument: the most recently started sweep (the newest runs/*/sweep.json). A results.jsonl (what a
published report commits) rebuilds the same report. `--wandb ENTITY/PROJECT [--group NAME]` reads the runs
from W&B instead of the disk, and `--wandb-report` also creates a W&B report (needs network, credentials and
the `ffnbench[wandb-reports]` extra).

Modules, in the order a report is made:
    layout.py       the files of a report's folder: REPORT.md, results.jsonl, figures/
    load.py         runs from a sweep directory or a results.jsonl; what may be pooled; the newest sweep
    comparisons.py  how runs group into comparisons (setting, lr) and variants, for tables and figures
    sections.py     REPORT.md's markdown: summary, claims, results tables, runs not used, provenance
    figures/        the figures (matplotlib, PNG), a module per kind: budgets, curves, variants, lr, forest
    build.py        load → claims → figures, results.jsonl and REPORT.md in one folder
    wandb.py        runs read from W&B, and the W&B report
    cli.py          the command line
"""

from ffnbench.report.build import build, write_report, write_results
from ffnbench.report.cli import main
from ffnbench.report.layout import FIGURES_DIR, REPORT_FILE, RESULTS_FILE
from ffnbench.report.load import RUNS_ROOT, Loaded, Unused, latest_sweep, load

__all__ = ["FIGURES_DIR", "REPORT_FILE", "RESULTS_FILE", "RUNS_ROOT", "Loaded", "Unused", "build", "latest_sweep",
           "load", "main", "write_report", "write_results"]
