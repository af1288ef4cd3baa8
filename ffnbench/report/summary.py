"""The results tables of README.md and experiments/*/README.md, generated from the published reports so that no
number in them is typed by hand: `python -m ffnbench.report.summary` rewrites every marked block from the
REPORT.md files it names; `--check` only says which block differs (tests/test_docs.py runs it).

A block is the text between `<!-- results:NAME -->` and `<!-- /results:NAME -->`: `readme` (README.md: every
published report's verdicts side by side) or an experiment folder's name (its README.md: its report's claims
table, and its regime table where it has one). Outside the blocks, a README's prose may quote a number only if its
report holds it (`stray_numbers`)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"
# README.md's columns: the published reports, newest protocol last
README_COLUMNS = (("cpu-quick", "`cpu-quick` (demo)"), ("cpu-claims", "`cpu-claims` (superseded)"),
                  ("cpu-robust", "`cpu-robust`"))
SHORT = {  # each claim in a few words (the statement is docs/claims.md's)
    "C1": "4·d is the sweet spot", "C2": "SwiGLU at 8/3·d = a 4× FFN's params", "C3": "SwiGLU beats GELU",
    "C4": "GELU beats ReLU", "C5": "ReLU zeroes about half; GELU none", "C6": "large lrs kill ReLU units",
    "C7": "FFN biases can go", "C8": "Swish beats ReLU, more in deep nets", "C9": "aligned d_ff is faster",
    "C10": "the FFN is 2/3 of a block", "C11": "FFN FLOPs = 4·n·d·d_ff", "C12": "the documents' table",
    "C13": "no nonlinearity, no point"}
BLOCK = re.compile(r"<!-- results:([\w-]+) -->\n(.*?)\n?<!-- /results:\1 -->", flags=re.S)
NUMBER = re.compile(r"(?<![\w.])[+−-]?\d+\.\d+(?!\w|\.\d)")


def _table_after(text: str, heading: str) -> list[str]:
    """The markdown table's lines that follow `heading` (the first table after it)."""
    at = text.find(heading)
    if at < 0:
        return []
    lines = text[at:].splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    if start is None:
        return []
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def claim_rows(report: str) -> dict[str, list[str]]:
    """{claim id: its summary row's cells after the id (report.rows.HEADER: verdict, deciding effect, decided in,
    labels, n)} of a REPORT.md."""
    rows = _table_after(report, "## Claims")
    return {cells[0]: cells[1:] for cells in map(_cells, rows[2:])}


def readme_block(reports: dict[str, str]) -> str:
    """README.md's table: each claim's verdict in every published report, and the newest's deciding effect, the
    setting it was decided in, its labels and seeds."""
    last = README_COLUMNS[-1][0]
    head = ["claim", *(title for _, title in README_COLUMNS), f"{last}: deciding effect, 95% CI",
            f"{last}: decided in", f"{last}: labels", "n"]
    rows = {name: claim_rows(reports[name]) for name, _ in README_COLUMNS}
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for cid, short in SHORT.items():
        newest = rows[last].get(cid, ["–"] * 5)
        lines.append("| " + " | ".join([f"{cid} {short}", *(rows[n].get(cid, ["–"])[0] for n, _ in README_COLUMNS),
                                        *newest[1:5]]) + " |")
    return "\n".join(lines)


def experiment_block(report: str) -> str:
    """An experiment README's block: its report's claims table, then its regime table where it has one."""
    out = _table_after(report, "## Claims")
    regime = _table_after(report, "## Regime")
    if regime:
        out += ["", "Regime (each headline difference best-vs-best per cell; positive is the textbook's order):", "",
                *regime]
    return "\n".join(out)


def block_text(name: str) -> str:
    if name == "readme":
        return readme_block({n: (EXPERIMENTS / n / "REPORT.md").read_text() for n, _ in README_COLUMNS})
    return experiment_block((EXPERIMENTS / name / "REPORT.md").read_text())


def _sources(name: str) -> str:
    """The reports a block is built from, as paths to name in a message."""
    names = [n for n, _ in README_COLUMNS] if name == "readme" else [name]
    return ", ".join(f"experiments/{n}/REPORT.md" for n in names)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(EXPERIMENTS.glob("*/README.md"))]


def regenerate(page: Path, check: bool = False) -> list[str]:
    """Rewrite (or, `check`, compare) every marked block of `page`; a line per block that differed: what to do about
    it (`check`), or what was rewritten."""
    text = page.read_text()
    problems = []

    def fill(m: re.Match) -> str:
        name, want = m.group(1), block_text(m.group(1))
        if m.group(2) != want:
            where = f"{page.relative_to(ROOT)}: block results:{name}"
            if check:
                report = "<name>" if name == "readme" else name
                problems.append(f"{where} differs from {_sources(name)}; rewrite it with `python -m "
                                "ffnbench.report.summary` (a report that is itself stale first: `python -m "
                                f"ffnbench.report experiments/{report}/results.jsonl`)")
            else:
                problems.append(f"{where} rewritten from {_sources(name)}: review and commit it")
        return f"<!-- results:{name} -->\n{want}\n<!-- /results:{name} -->"

    new = BLOCK.sub(fill, text)
    if not check and new != text:
        page.write_text(new)
    return problems


def _cost_output(folder: Path) -> str:
    """What the experiment's cost.py prints (its per-arm budget), where it has one: prose may quote it too."""
    import subprocess

    script = folder / "cost.py"
    if not script.exists():
        return ""
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True).stdout


def stray_numbers(page: Path) -> list[str]:
    """Decimal numbers in `page` outside its generated blocks that no source it draws on holds: an experiment
    README's prose may quote its report and its cost.py, never a number of its own; README.md's results section
    (from its heading to the next) may quote the published reports."""
    text = page.read_text()
    if page == ROOT / "README.md":
        at = text.find("## Published results")
        end = text.find("\n## ", at + 1)
        text = text[at:end if end > 0 else None] if at >= 0 else ""
        held_text = "".join((EXPERIMENTS / n / "REPORT.md").read_text() for n, _ in README_COLUMNS)
    else:
        held_text = (page.parent / "REPORT.md").read_text() + _cost_output(page.parent)
    held = {_norm(x) for x in NUMBER.findall(held_text)}
    prose = BLOCK.sub("", text)
    return sorted({x for x in NUMBER.findall(prose) if _norm(x) not in held and _norm(x).lstrip("+-") not in
                   {_norm(h).lstrip("+-") for h in held}})


def _norm(x: str) -> str:
    return x.replace("−", "-")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ffnbench.report.summary", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 if a block differs")
    ns = parser.parse_args(argv)
    problems = [p for page in pages() for p in regenerate(page, ns.check)]
    for p in problems:
        print(p)
    if not problems:
        print("every results block matches its report" if ns.check else
              "nothing rewritten: every results block already matches its report")
    if ns.check and problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
