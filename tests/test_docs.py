"""The documentation: each claim's rule in docs/claims.md is the registry's (`Claim.rule` is the one source),
every relative link of README.md and docs/*.md points at a file that exists, and every shell command in them has a
rule in tools/doc_commands.py saying how it is checked (run by `tools/doc_commands.py --run`, not here)."""

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from ffnbench.claims import CLAIMS

ROOT = Path(__file__).resolve().parents[1]
CLAIMS_DOC = ROOT / "docs" / "claims.md"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

MARKED_RULE = re.compile(r"<!-- rule:(C\d+) -->\n(.*?)\n<!-- /rule:\1 -->", flags=re.S)
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")  # [text](target "title")
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", flags=re.M)  # [label]: target
CODE = re.compile(r"^(```|~~~).*?^\1", flags=re.S | re.M)  # fenced blocks: their brackets are code, not links
INLINE_CODE = re.compile(r"`[^`\n]*`")


def test_every_claims_rule_in_docs_is_the_registrys_rule():
    text = CLAIMS_DOC.read_text()
    marked: dict[str, list[str]] = {}
    for claim_id, rule in MARKED_RULE.findall(text):
        marked.setdefault(claim_id, []).append(rule)
    problems = []
    for c in CLAIMS:
        if c.id not in marked:
            problems.append(f"{c.id}: no <!-- rule:{c.id} --> … <!-- /rule:{c.id} --> block")
        elif len(marked[c.id]) > 1:
            problems.append(f"{c.id}: {len(marked[c.id])} rule blocks, expected one")
        elif marked[c.id][0] != c.rule:
            problems.append(f"{c.id}: the rule differs from ffnbench/claims/registry.py's; paste the registry's:\n"
                            f"{c.rule}")
    from ffnbench.claims.registry import SHARED_RULES

    shared = re.search(r"<!-- rule:shared -->\n(.*?)\n<!-- /rule:shared -->", text, flags=re.S)
    expected = "\n".join(f"- **{k}:** {v}." for k, v in SHARED_RULES.items())
    if shared is None or shared.group(1) != expected:
        problems.append(f"the shared rules differ from ffnbench/claims/registry.py's SHARED_RULES; paste:\n{expected}")
    unknown = sorted(set(marked) - {c.id for c in CLAIMS})
    problems += [f"{i}: a rule block for a claim the registry does not have" for i in unknown]
    opened = set(re.findall(r"<!-- rule:(C\d+) -->", text))
    problems += [f"{i}: its rule block is not closed by <!-- /rule:{i} -->" for i in sorted(opened - set(marked))]
    assert not problems, "\n".join(problems)


def _targets(page: Path) -> list[str]:
    text = INLINE_CODE.sub("", CODE.sub("", page.read_text()))
    return LINK.findall(text) + REFERENCE.findall(text)


def test_every_relative_link_in_readme_and_docs_points_at_a_file_that_exists():
    assert len(PAGES) > 1 and _targets(ROOT / "README.md"), "no links found: the link pattern is broken"
    broken = []
    for page in PAGES:
        for target in _targets(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.I) or target.startswith("#"):
                continue  # a URL (https:, mailto:) or an anchor on the same page
            path = target.split("#", 1)[0].split("?", 1)[0]
            if not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


SOURCE_PATH = re.compile(r"(?<![\w./-])(?:ffnbench|tests|tools|hydra_plugins|experiments)/[\w/.-]*\w\.(?:py|sh|yaml)\b")


def test_every_source_file_the_docs_name_exists():
    """A module moved into a package (or renamed) leaves no page pointing at its old file."""
    pages = [*PAGES, *sorted((ROOT / "experiments").glob("*/README.md"))]
    named = {(page, m) for page in pages for m in SOURCE_PATH.findall(page.read_text()) if "<" not in m}
    assert len(named) > 20, "few paths found: the path pattern is broken"
    missing = sorted(f"{page.relative_to(ROOT)}: {path}" for page, path in named if not (ROOT / path).exists())
    assert not missing, "named files that do not exist:\n" + "\n".join(missing)


def _doc_commands():
    """tools/doc_commands.py (a script, not a package), loaded once."""
    if "doc_commands" not in sys.modules:
        spec = importlib.util.spec_from_file_location("doc_commands", ROOT / "tools" / "doc_commands.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["doc_commands"] = module  # its dataclasses look their module up there
        spec.loader.exec_module(module)
    return sys.modules["doc_commands"]


def test_every_command_in_readme_and_docs_has_a_rule_saying_how_it_is_checked():
    doc_commands = _doc_commands()
    found = {c.text for c in doc_commands.commands()}
    assert {"make test", "make sweep", "python -m ffnbench.data"} <= found, "the command extraction is broken"
    assert not doc_commands.problems(), "\n".join(doc_commands.problems())


def test_a_new_command_without_a_rule_fails_the_check(tmp_path):
    doc_commands = _doc_commands()
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("```sh\nmake test\nmake frobnicate   # new\n```\nThen `make help`.\n")
    assert [c.text for c in doc_commands.commands(tmp_path)] == ["make test", "make frobnicate", "make help"]
    assert any("`make frobnicate`" in p for p in doc_commands.problems(tmp_path))


SAMPLE = re.compile(r"^(?:python -m )?ffnbench sample runs/(\S+)/(\S+)")
SWEEP = re.compile(r"^make sweep(?: EXP=(\w+))?(?: |$)")


def sampled_runs_without_a_sweep(root: Path = ROOT) -> list[str]:
    """Every `ffnbench sample runs/<exp>/<run>` of a page whose run no `make sweep [EXP=<exp>]` of that page plans:
    a reader following the page would have no such folder."""
    from ffnbench.sweep.planning import plan

    doc_commands = _doc_commands()
    sweeps: dict[str, set[str]] = {}  # page → the experiments its `make sweep` commands run
    samples = []
    for c in doc_commands.commands(root):
        pages = {place.rsplit(":", 1)[0] for place in c.places}
        if m := SWEEP.match(c.text):
            for page in pages:
                sweeps.setdefault(page, set()).add(m.group(1) or "quick")
        elif m := SAMPLE.match(c.text):
            samples += [(page, m) for page in pages]
    planned: dict[str, set[str]] = {}
    problems = []
    for page, m in samples:
        experiment, run = m.groups()
        if experiment not in sweeps.get(page, set()):
            problems.append(f"{page}: `{m.group(0)}` samples a run of `{experiment}`, which no `make sweep` there runs")
            continue
        if experiment not in planned:
            planned[experiment] = {r.run_dir.name for r in plan(experiment, None, [])[0]}
        if run not in planned[experiment]:
            problems.append(f"{page}: `{m.group(0)}`: `make sweep EXP={experiment}` plans no run {run}")
    return problems


def test_every_sampled_run_is_one_the_pages_own_sweep_commands_create(tmp_path):
    """README's `ffnbench sample runs/default/gelu-b4-nobias-s0` named a folder only a bare default run leaves; the
    path must be one the page's own commands create. The check can fail: a page sampling that folder is refused."""
    assert sampled_runs_without_a_sweep() == []
    (tmp_path / "docs").mkdir()
    (tmp_path / "README.md").write_text("```sh\nmake sweep\npython -m ffnbench sample runs/default/gelu-b4-nobias-s0\n"
                                        "python -m ffnbench sample runs/quick/gelu-w3-nobias-s0\n```\n")
    assert sampled_runs_without_a_sweep(tmp_path) == [
        "README.md: `python -m ffnbench sample runs/default/gelu-b4-nobias-s0` samples a run of `default`, which no "
        "`make sweep` there runs",
        "README.md: `python -m ffnbench sample runs/quick/gelu-w3-nobias-s0`: `make sweep EXP=quick` plans no run "
        "gelu-w3-nobias-s0"]


def test_every_results_table_is_its_reports_and_no_prose_number_is_typed_by_hand():
    """README.md's and each experiment README's results blocks are what `python -m ffnbench.report.summary` builds
    from the published REPORT.md files, and every decimal number outside them is one its report holds."""
    from ffnbench.report.summary import pages, regenerate, stray_numbers

    problems = [p for page in pages() for p in regenerate(page, check=True)]
    problems += [f"{page.relative_to(ROOT)}: {', '.join(nums)} not in its report (quote the report, or put it in a "
                 "generated block)" for page in pages() if (nums := stray_numbers(page))]
    blocks = {page.name: page.read_text().count("<!-- results:") for page in pages()}
    assert blocks["README.md"] >= 1, "README.md has no generated results block"
    assert not problems, "\n".join(problems)


def test_a_changed_number_in_a_results_block_or_the_prose_fails_the_check(tmp_path, monkeypatch):
    """The check can fail: a digit changed inside a block, or a number of its own in the prose."""
    import ffnbench.report.summary as summary

    exp = tmp_path / "experiments" / "x"
    exp.mkdir(parents=True)
    report = ("## Claims\n\n| claim | verdict | where it ran | effect | n |\n|---|---|---|---|---|\n"
              "| C1 | **a** | – | +0.1234 | 3 |\n")
    (exp / "REPORT.md").write_text(report)
    monkeypatch.setattr(summary, "EXPERIMENTS", tmp_path / "experiments")
    monkeypatch.setattr(summary, "ROOT", tmp_path)
    page = exp / "README.md"
    good = f"Prose quoting +0.1234.\n<!-- results:x -->\n{summary.block_text('x')}\n<!-- /results:x -->\n"
    page.write_text(good)
    assert summary.regenerate(page, check=True) == [] and summary.stray_numbers(page) == []
    page.write_text(good.replace("| +0.1234 |", "| +0.1235 |"))
    assert summary.regenerate(page, check=True)
    page.write_text(good.replace("Prose quoting +0.1234.", "Prose quoting 0.87."))
    assert summary.stray_numbers(page) == ["0.87"]


def test_the_summary_tool_says_what_it_did_and_what_to_do_not_to_run_itself(tmp_path, monkeypatch, capsys):
    """Write mode reports the blocks it rewrote (it used to say "run `python -m ffnbench.report.summary`", itself);
    --check names the report a block differs from, the command that rewrites it and the one that rebuilds the report."""
    import ffnbench.report.summary as summary

    exp = tmp_path / "experiments" / "x"
    exp.mkdir(parents=True)
    (exp / "REPORT.md").write_text("## Claims\n\n| claim | verdict | where it ran | effect | n |\n"
                                   "|---|---|---|---|---|\n| C1 | **a** | – | +0.1234 | 3 |\n")
    monkeypatch.setattr(summary, "EXPERIMENTS", tmp_path / "experiments")
    monkeypatch.setattr(summary, "ROOT", tmp_path)
    monkeypatch.setattr(summary, "pages", lambda: [exp / "README.md"])
    stale = "<!-- results:x -->\nold\n<!-- /results:x -->\n"
    (exp / "README.md").write_text(stale)
    with pytest.raises(SystemExit) as exit_:
        summary.main(["--check"])
    checked = capsys.readouterr().out
    assert exit_.value.code == 1 and (exp / "README.md").read_text() == stale
    assert "experiments/x/README.md: block results:x differs from experiments/x/REPORT.md" in checked
    assert "rewrite it with `python -m ffnbench.report.summary`" in checked
    assert "`python -m ffnbench.report experiments/x/results.jsonl`" in checked
    summary.main([])
    wrote = capsys.readouterr().out
    assert wrote.strip() == "experiments/x/README.md: block results:x rewritten from experiments/x/REPORT.md: review " \
                           "and commit it"
    assert "+0.1234" in (exp / "README.md").read_text()
    summary.main([])
    assert capsys.readouterr().out.strip() == "nothing rewritten: every results block already matches its report"
    summary.main(["--check"])
    assert capsys.readouterr().out.strip() == "every results block matches its report"


def _cells(line: str) -> int:
    text = INLINE_CODE.sub("", line.strip())
    return len(re.split(r"(?<!\\)\|", text.strip("|")))


def test_every_markdown_table_has_as_many_cells_in_every_row_as_its_header():
    """A table whose rows and header differ in cell count does not render (GitHub drops it to text)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "experiments").rglob("*.md"))]
    problems = []
    for page in pages:
        lines = CODE.sub(lambda m: "\n" * m.group(0).count("\n"), page.read_text()).splitlines()
        i = 0
        while i < len(lines):
            if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"^\|[\s:|-]+\|\s*$", lines[i + 1]):
                head = _cells(lines[i])
                j = i + 1
                while j < len(lines) and lines[j].startswith("|"):
                    if _cells(lines[j]) != head:
                        problems.append(f"{page.relative_to(ROOT)}:{j + 1}: {_cells(lines[j])} cells, the header "
                                        f"has {head}")
                    j += 1
                i = j
            else:
                i += 1
    assert not problems, "\n".join(problems)
