"""Every shell command of README.md and docs/*.md, and how each one is checked.

A command is a line of a ```sh / ```bash / ```shell block (comments and `\\` continuations handled), a `$ ` line of
a ```console or unlabelled block, or an inline code span outside the blocks that starts like a command a reader would
copy (`make ...`, `python -m ...`, `.venv/bin/...`, `pip ...`, `ffnbench <word> ...`). RULES gives each one a kind,
by the first pattern that matches the whole command:

- runs:   run as written; must exit 0 within its time limit.
- starts: a long command, run as written until it shows it started (the output its rule names, else its first
          training step); exiting 0 before that also passes, any other exit fails.
- needs:  needs what a check machine lacks (a GPU, the internet, SLURM); run as written, it must stop within its
          time limit with ffnbench's one-line error (`ffnbench: error: ...`, naming what its rule names), exit
          status 2 and no traceback, before any training step.
- skip:   not run, for the reason the rule gives.

    python tools/doc_commands.py --list    # each command, its places (file:line) and its kind
    python tools/doc_commands.py --check   # exit 1 if a command has no rule or a rule matches no command
    python tools/doc_commands.py --run     # run them, on a clean clone after `make install`

--run writes where the commands write (runs/, experiments/bench/<host>/, the published reports it rebuilds), so
run it on a clean clone. Each command runs in bash from the repository root with .venv/bin first on PATH (the venv
activated), WANDB_MODE=offline unless set, and FFNBENCH_STEP_TIMES naming a file that train() marks at its first
training step (callbacks.StepTimes), which is how `starts` and `needs` see a training step. Stdlib only: it runs
before anything is installed.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHELL_LANGS = {"sh", "bash", "shell"}
# inline code spans that are commands a reader would copy (paths such as `ffnbench/model/ffn.py` are not)
INLINE_COMMAND = re.compile(r"^(make(\s|$)|python3?(\.\d+)?\s|\.venv/bin/|\./\.ci/|\.ci/|pip\s|wandb\s|git\s"
                            r"|ffnbench\s+[a-z<]|experiments/\S+\.sh(\s|$))")
FENCE = re.compile(r"^(```|~~~)\s*([\w-]*)")
INLINE_CODE = re.compile(r"`([^`]+)`")

# what a check machine lacks, and the words ffnbench's one-line error must use for it
GPU = r"GPU|CUDA"
NETWORK = r"offline|internet|network|hub|download"
TEMPLATE = "a syntax template (placeholders or [optional] parts): its concrete forms are checked"


def _conf_names(group: str, line: str) -> str:
    """The names of conf/<group>/*.yaml holding a line that `line` matches, as a regex alternation: a new
    experiment or data source is covered by its file alone (docs/extending.md), not by an edit here."""
    names = [p.stem for p in sorted((ROOT / "conf" / group).glob("*.yaml"))
             if re.search(line, p.read_text(), re.M)]
    return "|".join(map(re.escape, names)) or "(?!)"


# the experiments sized for a GPU (their defaults take _gpu.yaml), and the sources read from the Hugging Face Hub
GPU_EXPERIMENTS = _conf_names("experiment", r"^\s*-\s*_gpu\s*$")
HUB_SOURCES = _conf_names("data", r"^loader:\s*hub\b")


@dataclass(frozen=True)
class Rule:
    """How the commands that `pattern` matches (re.fullmatch) are checked.

    Args:
        pattern: a regular expression matched against the whole command.
        kind: runs | starts | needs | skip.
        note: for skip, why it is not run; for needs, a regex the `ffnbench: error:` line must match; for starts,
            a regex of output that shows it started (empty: its first training step).
        timeout_s: the time limit in seconds on an idle machine (--time-scale stretches it).
    """

    pattern: str
    kind: str
    note: str = ""
    timeout_s: int = 0


RULES: list[Rule] = [
    Rule(r".*(<[a-zA-Z][^>]*>|\[(--|[A-Z]+=|overrides\])).*", "skip", TEMPLATE),
    # installs and the whole test suite
    Rule(r"python3\.11 -m venv \.venv", "skip", "creates the venv `make install` made on this clone"),
    Rule(r"(\.venv/bin/)?pip install .*", "skip", "installs packages (a CUDA wheel or an extra) from an index"),
    Rule(r"make install", "runs", timeout_s=60),
    Rule(r"make test", "starts", r"^[.sxX]+ +\[ *\d+%\]$", 300),  # a line of tests passed
    Rule(r"make test-slow", "skip", "the slow checks, minutes each (the suite's part the lead runs before a merge)"),
    Rule(r"make test-min", "skip", "installs a second venv at pyproject.toml's lowest versions from the index"),
    Rule(r"python -m pytest -q", "skip", "the whole suite run serially (~15 min): `make test` is checked instead"),
    Rule(r"python3 tools/doc_commands\.py --run", "skip", "this check itself"),
    Rule(r"(\./)?\.ci/run", "skip", "runs exactly `make test`, checked as such"),
    Rule(r"python -m ffnbench\.sweep full --dry-run", "runs", timeout_s=900),  # plans and prices ~3,000 runs
    Rule(r"python -m ffnbench\.sweep quick -- data\.batch_size=0", "skip",
         "bad input on purpose: tests/sweep/test_cli.py checks its exit 2 and that it writes nothing"),
    Rule(r"python -m ffnbench\.sweep|wandb sync", "skip", "names a program in prose: its commands are checked"),
    Rule(r"\.venv/bin/python -m pytest -q( tests/[\w/]+\.py)+", "runs", timeout_s=300),  # a change's narrow tests
    Rule(r"make (help|lint|clean)", "runs", timeout_s=120),
    Rule(r"python tools/import_cycles\.py( --layers)?", "runs", timeout_s=60),
    # the tables, the corpus, the checks of the environment
    Rule(r"(make params|(python -m )?ffnbench params|python -m ffnbench params( [\w.=]+)*)", "runs", timeout_s=120),
    Rule(r"make data|python -m ffnbench\.data", "runs", timeout_s=180),
    Rule(r"(python -m )?ffnbench sample runs/\S+( .*)?|python -m ffnbench\.sample", "skip",
         "samples a trained run's checkpoint, which no command before it leaves (tests/test_sample.py trains a micro "
         "run and samples it)"),
    Rule(r"\.venv/bin/python -c .*", "runs", timeout_s=120),
    # reports of published results and of the sweep started above
    Rule(r"python -m ffnbench\.report experiments/cpu-(quick|claims)/results\.jsonl", "runs", timeout_s=600),
    Rule(r"make report", "runs", timeout_s=300),
    Rule(r"python -m ffnbench\.report\.summary( --check)?", "runs", timeout_s=300),
    # training: runs until its first step
    Rule(r"make sweep EXP=micro", "runs", timeout_s=300),
    Rule(r"make sweep", "starts", timeout_s=300),
    Rule(r"python -m ffnbench\.bench\.gpucheck --cpu-smoke --out \S+", "runs", timeout_s=600),
    Rule(r"python -m ffnbench\.train experiment=activations --cfg job", "runs", timeout_s=120),
    Rule(r"python -m ffnbench\.train (model=tiny|ffn=swiglu ffn\.budget=4)", "starts", timeout_s=300),
    Rule(r'make sweep EXP=bias ARGS="trainer\.accelerator=cpu .*"', "starts", timeout_s=300),
    Rule(r"make bench|python -m ffnbench\.bench --only .*", "starts", timeout_s=300),
    # the campaign: planning its ~500 runs (lr rounds included) takes a minute or more before the first one trains
    Rule(r"make sweep EXP=cpu_robust(_more)? CONFIRM=1|python -m ffnbench\.sweep cpu_robust --confirm --grids 0-2"
         r"|experiments/cpu-robust/campaign\.sh --restore experiments/cpu-robust/results\.jsonl",
         "starts", timeout_s=900),
    # what a CPU-only machine without the internet cannot do
    Rule(r"make gpu-check|python -m ffnbench\.bench\.gpucheck", "needs", GPU, 180),
    Rule(rf"make sweep EXP=({GPU_EXPERIMENTS})( .*)?", "needs", rf"{GPU}|{NETWORK}|SLURM|sbatch", 180),
    Rule(rf"python -m ffnbench\.(train|data) .*data=({HUB_SOURCES})( .*)?", "needs", NETWORK, 180),
]


@dataclass
class Command:
    """One distinct command and every place the documents give it."""

    text: str
    places: list[str] = field(default_factory=list)


def _strip_comment(line: str) -> str:
    """`line` without its shell comment: a `#` at the start or after a space, outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def _block_commands(lines: list[tuple[int, str]], lang: str) -> list[tuple[int, str]]:
    """The commands of one fenced block given as (line number, text) pairs; `lang` is its info string."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in lines:
        if lang in SHELL_LANGS:
            text = _strip_comment(raw.strip())
        elif raw.startswith("$ "):
            text = _strip_comment(raw[2:].strip())
        else:
            continue  # console output, or a block that is not shell
        if pending:
            number, text = pending[0], f"{pending[1]} {text.strip()}"
            pending = None
        if text.endswith("\\"):
            pending = (number, text[:-1].rstrip())
        elif text:
            out.append((number, text))
    if pending:
        out.append(pending)
    return out


def extract(page: Path) -> list[tuple[int, str]]:
    """Every command of one markdown page, as (line number, command) in page order."""
    lines = page.read_text().splitlines()
    found: list[tuple[int, str]] = []
    prose: list[tuple[int, str]] = []
    block: list[tuple[int, str]] | None = None
    lang = fence = ""
    for number, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if block is None and m:
            block, fence, lang = [], m.group(1), m.group(2).lower()
        elif block is not None and line.startswith(fence):
            found += _block_commands(block, lang)
            block = None
        elif block is not None:
            block.append((number, line))
        else:
            prose.append((number, line))
    # inline spans may wrap onto the next line of their paragraph: join each paragraph, remember where lines start
    paragraph: list[tuple[int, str]] = []
    for number, line in [*prose, (0, "")]:
        if line.strip():
            paragraph.append((number, line))
            continue
        text, starts = "", []
        for n, part in paragraph:
            starts.append((len(text), n))
            text += part + "\n"
        for m in INLINE_CODE.finditer(text):
            span = " ".join(m.group(1).split())
            if INLINE_COMMAND.match(span):
                found.append((max(n for offset, n in starts if offset <= m.start()), span))
        paragraph = []
    return sorted(found)


def commands(root: Path = ROOT) -> list[Command]:
    """Every distinct command of README.md and docs/*.md, in reading order, with its places."""
    by_text: dict[str, Command] = {}
    for page in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for number, text in extract(page):
            by_text.setdefault(text, Command(text)).places.append(f"{page.relative_to(root)}:{number}")
    return list(by_text.values())


def rule_for(text: str) -> Rule | None:
    """The first rule whose pattern matches the whole command, or None."""
    return next((r for r in RULES if re.fullmatch(r.pattern, text)), None)


def problems(root: Path = ROOT) -> list[str]:
    """What keeps the table complete: commands no rule matches, and rules that match no command."""
    found = commands(root)
    out = [f"{', '.join(c.places)}: no rule in tools/doc_commands.py's RULES says how to check `{c.text}`"
           for c in found if rule_for(c.text) is None]
    used = {rule_for(c.text) for c in found}
    out += [f"tools/doc_commands.py: the rule {r.pattern!r} matches no command of the documents: remove it"
            for r in RULES if r not in used]
    return out


# ---- running them ----

@dataclass
class Outcome:
    """What running one command gave."""

    passed: bool
    seconds: float
    why: str
    output: str


def _kill(proc: subprocess.Popen) -> None:
    """Stop the command's whole process group and wait until it is gone: SIGTERM (a training run stops at its next
    batch and checkpoints), then SIGKILL. The shell exits at once; a training run below it may not, so the group is
    watched, not the shell, lest it train on beside the next command."""
    for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            proc.poll()  # reap the shell: a zombie still counts as a member of its group
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.5)


def run_one(text: str, rule: Rule, time_scale: float) -> Outcome:
    """Run `text` as its rule says and judge it."""
    with tempfile.NamedTemporaryFile(prefix="step-times-", suffix=".jsonl", delete=False) as f:
        marks = Path(f.name)
    env = dict(os.environ, FFNBENCH_STEP_TIMES=str(marks), VIRTUAL_ENV=str(ROOT / ".venv"),
               PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    env.setdefault("WANDB_MODE", "offline")
    started = time.monotonic()
    proc = subprocess.Popen(["bash", "-c", text], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, errors="replace",
                            start_new_session=True)
    chunks: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            chunks.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = started + rule.timeout_s * time_scale
    stepped = shown = False

    def reached() -> bool:  # what stops a command before it ends: a start shown, or a training step it should not take
        return (shown if rule.note else stepped) if rule.kind == "starts" else rule.kind == "needs" and stepped

    while proc.poll() is None and time.monotonic() < deadline and not reached():
        time.sleep(0.5)
        stepped = "first_step_end" in marks.read_text()
        shown = rule.kind == "starts" and bool(re.search(rule.note or "(?!)", "".join(chunks), re.M))
    timed_out = proc.poll() is None and not reached()
    if proc.poll() is None:
        _kill(proc)
    reader.join(5)
    seconds = time.monotonic() - started
    stepped = stepped or "first_step_end" in marks.read_text()
    marks.unlink(missing_ok=True)
    output, code = "".join(chunks), proc.returncode
    shown = rule.kind == "starts" and bool(re.search(rule.note or "(?!)", output, re.M))
    passed, why = _judge(rule, output, code, stepped, shown, timed_out, rule.timeout_s * time_scale)
    return Outcome(passed, seconds, why, output)


def _judge(rule: Rule, output: str, code: int, stepped: bool, shown: bool, timed_out: bool,
           limit_s: float) -> tuple[bool, str]:
    """(passed, why) for one finished or stopped command."""
    if rule.kind == "runs":
        if timed_out:
            return False, f"still running after {limit_s:.0f} s"
        return code == 0, f"exit {code}"
    if rule.kind == "starts":
        if shown if rule.note else stepped:
            return True, "showed it started" if rule.note else "reached its first training step"
        if timed_out:
            return False, f"not started within {limit_s:.0f} s"
        return code == 0, f"exit {code} before it started"
    errors = [line for line in output.splitlines() if line.startswith("ffnbench: error: ")]
    if stepped:
        return False, "it trained: the missing GPU/network/SLURM went unnoticed"
    if timed_out:
        return False, f"no error within {limit_s:.0f} s"
    if "Traceback (most recent call last)" in output:
        return False, f"a traceback (exit {code}) instead of a one-line error"
    if code != 2 or not errors:
        return False, f"exit {code} without an `ffnbench: error:` line"
    if not re.search(rule.note, errors[-1]):
        return False, f"the error does not name the problem ({rule.note}): {errors[-1]}"
    return True, errors[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--list", action="store_true", help="print each command, its places and its kind")
    mode.add_argument("--check", action="store_true", help="fail if a command has no rule or a rule no command")
    mode.add_argument("--run", action="store_true", help="run every command as its rule says (a clean clone)")
    parser.add_argument("--only", metavar="REGEX", help="--run only the commands this regex finds")
    parser.add_argument("--exclude", metavar="REGEX", help="--run none of the commands this regex finds")
    parser.add_argument("--kinds", default="runs,starts,needs", help="--run only these kinds (comma-separated)")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="multiply every time limit (a busy machine)")
    parser.add_argument("--logs", metavar="DIR", help="write each command's output to DIR/<n>.log")
    args = parser.parse_args(argv)

    found = problems()
    if found:
        print("\n".join(found), file=sys.stderr)
        return 1
    if args.check:
        return 0
    if args.list:
        for c in commands():
            r = rule_for(c.text)
            print(f"{r.kind:<6}  {c.text}    [{', '.join(c.places)}]" + (f"  ({r.note})" if r.kind == "skip" else ""))
        return 0
    if not (ROOT / ".venv" / "bin" / "python").exists():
        print("doc_commands: no .venv here: run `make install` first", file=sys.stderr)
        return 2
    logs = Path(args.logs) if args.logs else None
    if logs:
        logs.mkdir(parents=True, exist_ok=True)
    failed = 0
    for n, c in enumerate(commands(), 1):
        r = rule_for(c.text)
        if (r.kind not in args.kinds.split(",") or (args.only and not re.search(args.only, c.text))
                or (args.exclude and re.search(args.exclude, c.text))):
            continue
        o = run_one(c.text, r, args.time_scale)
        failed += not o.passed
        print(f"{'PASS' if o.passed else 'FAIL'}  {r.kind:<6} {o.seconds:6.0f} s  {c.text}  [{c.places[0]}]: {o.why}",
              flush=True)
        if not o.passed:
            print("    " + "\n    ".join(o.output.splitlines()[-15:]), flush=True)
        if logs:
            (logs / f"{n:02d}.log").write_text(f"$ {c.text}\n{o.output}")
    print(f"{failed} failed" if failed else "every command passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
