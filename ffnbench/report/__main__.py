"""`python -m ffnbench.report ...`: see ffnbench/report/cli.py."""

from ffnbench.report.cli import main

main()
