"""The files of a report's folder, by the names REPORT.md links them and a rebuild finds them: the report, the
runs it was made of, and its figures."""

REPORT_FILE = "REPORT.md"
RESULTS_FILE = "results.jsonl"  # one RunResult per line: what a published report commits, and what rebuilds it
FIGURES_DIR = "figures"  # the PNGs, linked from REPORT.md by this relative path
