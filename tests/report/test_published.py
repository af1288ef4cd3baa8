"""The published reports (experiments/<name>/REPORT.md) are what the report builds today from their results.jsonl:
a change to a claim, its rule or the report's text that is not followed by a rebuild fails here, as
tools/check_identity.sh fails. Two checks:

- fast: every published report states each registry claim's statement and rule, and the shared rules, as
  ffnbench/claims/registry.py has them now (the Method section lists the shared ones; each claim's section carries
  its statement and its rule);
- rebuild: each report rebuilt from its results.jsonl into a temporary folder equals the committed REPORT.md but for
  the generation time and the source line (what tools/check_identity.sh leaves out). cpu-robust takes about 1.5 min
  of CPU, so its rebuild is `slow`.

When either fails, rebuild the published reports (`python -m ffnbench.report experiments/<name>/results.jsonl` for
each), then the README tables (`python -m ffnbench.report.summary`), and commit them."""

import difflib
import re
from pathlib import Path

import pytest

from ffnbench.claims import CLAIMS
from ffnbench.claims.registry import SHARED_RULES

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ("cpu-quick", "cpu-claims", "cpu-robust")
VOLATILE = re.compile(r"^\*Generated |^- source: ")  # as tools/check_identity.sh: when and from which path it was built
REBUILD = (
    "rebuild it: `python -m ffnbench.report experiments/{0}/results.jsonl`, then `python -m ffnbench.report.summary`")


def test_every_report_tools_check_identity_rebuilds_is_published_here():
    """The list above is the one tools/check_identity.sh and README's results table rebuild from."""
    from ffnbench.report.summary import README_COLUMNS

    script = (ROOT / "tools" / "check_identity.sh").read_text()
    assert set(re.search(r"for e in ([\w -]+); do", script).group(1).split()) == set(PUBLISHED)
    assert {name for name, _ in README_COLUMNS} == set(PUBLISHED)
    assert all((ROOT / "experiments" / name / "results.jsonl").is_file() for name in PUBLISHED)


def stale_texts(report: str) -> list[str]:
    """What `report` states differently from the registry: a claim's statement, its rule or a shared rule."""
    lines = set(report.splitlines())
    problems = [f"{c.id}: its statement (### {c.id}: ...)" for c in CLAIMS if f"### {c.id}: {c.statement}" not in lines]
    problems += [f"{c.id}: its rule" for c in CLAIMS if f"**Rule:** {c.rule}." not in lines]
    problems += [f"the shared rule '{name}'" for name, text in SHARED_RULES.items() if f"- **{name}:** {text}." not in
                 lines]
    return problems


@pytest.mark.parametrize("name", PUBLISHED)
def test_a_published_report_states_the_registrys_claims_and_rules(name):
    """Fast: a rule or statement changed in the registry without a rebuild of the report fails here."""
    problems = stale_texts((ROOT / "experiments" / name / "REPORT.md").read_text())
    assert not problems, (f"experiments/{name}/REPORT.md is stale against ffnbench/claims/registry.py: "
                          + "; ".join(problems) + f"; {REBUILD.format(name)}")


def test_the_text_check_finds_a_changed_rule_and_a_missing_claim():
    """The check can fail: a report whose rule line lost a word, and one without a claim's section."""
    report = (ROOT / "experiments" / "cpu-robust" / "REPORT.md").read_text()
    c = CLAIMS[1]
    honest = "\n".join([f"### {x.id}: {x.statement}" for x in CLAIMS] + [f"**Rule:** {x.rule}." for x in CLAIMS]
                       + [f"- **{k}:** {v}." for k, v in SHARED_RULES.items()])
    assert stale_texts(honest) == []
    assert stale_texts(honest.replace(f"**Rule:** {c.rule}.", f"**Rule:** {c.rule[:-1]}.")) == [f"{c.id}: its rule"]
    assert stale_texts(honest.replace(f"### {c.id}: ", "### ")) == [f"{c.id}: its statement (### {c.id}: ...)"]
    assert "## Claims" in report  # the real report is the shape these lines come from


def comparable(text: str) -> list[str]:
    return [line for line in text.splitlines() if not VOLATILE.match(line)]


# Machine-dependent digits stay out of the reports (C13 prints its float64 error as a bound), so a rebuild on any
# machine gives the committed text; cpu-robust's rebuild takes minutes and is a slow check.
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "cpu-robust" else n
                                  for n in PUBLISHED])
def test_a_published_report_rebuilds_to_its_committed_text(name, tmp_path, monkeypatch):
    from ffnbench.report.build import write_report

    monkeypatch.chdir(ROOT)  # the source line names the path as given, as the committed reports do
    rebuilt = write_report(Path("experiments") / name / "results.jsonl", tmp_path / name)
    committed = (ROOT / "experiments" / name / "REPORT.md").read_text()
    diff = list(difflib.unified_diff(comparable(committed), comparable(rebuilt.read_text()),
                                     f"experiments/{name}/REPORT.md", "rebuilt", lineterm="", n=0))
    assert not diff, (f"experiments/{name}/REPORT.md differs from the report its results.jsonl builds today; "
                      f"{REBUILD.format(name)}\n" + "\n".join(line[:300] for line in diff[:60]))
