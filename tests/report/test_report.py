"""The report end to end (ffnbench.report.build, .sections, .figures, .comparisons, .cli) on synthetic sweeps:
sections, verdict lines, figures, rebuilding from results.jsonl, and the command line."""

import json
import re
import subprocess
import sys

import pytest
from fixtures.report.synthetic import make_record, sweep_records, write_sweep

from ffnbench import report
from ffnbench.claims import CLAIM_IDS, CLAIMS, Run
from ffnbench.claims.registry import SHARED_RULES
from ffnbench.model.ffn import VARIANTS
from ffnbench.report import method
from ffnbench.report.comparisons import comparisons, primary_runs, variant_order
from ffnbench.runs.result import RunResult
from ffnbench.stats.multiplicity import MULTIPLICITY

SECTIONS = ("# ffnbench report", "## Method", "## Claims", "## Results by comparison", "## Figures", "## Runs not used",
            "## Provenance")


def claims_section(text: str) -> str:
    return text[text.index("## Claims"):text.index("## Results by comparison")]


def run_of(rec: dict) -> Run:
    return Run.from_result(RunResult.from_json(rec))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A sweep with every kind of run: the finished ones of sweep_records() (all claims' data), one diverged, one
    failed, one running, one corrupt result.json and one listed run that never wrote a record."""
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
        row = rf"^\| {cid} \| \*\*(supported|contradicted|inconclusive)\*\*( \([^|]*\))? \|"
        assert re.search(row, text, re.M), cid
        assert f"### {cid}: " in text
    assert "Paired differences vs **gelu-b4-nobias**" in text and "Minimal detectable effect" in text
    assert "Seeds needed to resolve 0.01 nats" in text and "make sweep EXP=synthetic" in text


def method_section(text: str) -> str:
    return text[text.index("## Method"):text.index("## Claims")]


def test_method_section_is_one_rule_a_bullet_and_the_protocol_as_run_follows_the_claims(sweep):
    """The Method states the rules, each a short bullet (the band, the lr choice, the outcome table among them);
    each claim's own rule is in its section; the protocol as it ran (lr per verdict, grids, robustness labels, the
    noise each comparison used) has its own section after the claims."""
    _, text = sweep
    method = method_section(text)
    for name in SHARED_RULES:
        assert f"- **{name}:** {SHARED_RULES[name]}." in method, name
    assert "[0.4, 2]" in method and "equivalent within ±m" in method and "counted once" in method
    assert MULTIPLICITY in method
    assert "is not a finding" in method and "0.009 nats" in method
    assert "- **Instabilities** (recorded per run, outcomes of their variant at their lr, never dropped): plateau: " \
        in method
    bullets = [line for line in method.splitlines() if line.startswith("- ")]
    assert all(len(b) < 700 for b in bullets), max(bullets, key=len)
    for claim in CLAIMS:  # every rule, as the registry states it, in its claim's section
        section = text[text.index(f"### {claim.id}:"):]
        assert f"**Rule:** {claim.rule}." in section[:section.index("**Why:**")], claim.id
    protocol = text[text.index("## Protocol as run"):]
    used = len(sweep_records()) + 1  # the finished runs and the diverged one
    assert f"0 of the {used} runs here recorded them" in protocol  # the synthetic records have no per-window losses
    assert "**Learning rate (protocol per verdict):** C1: " in protocol
    assert "C6: relu's tuned lr decides which lrs count" in protocol
    assert ("**Robustness (claims.robust: lr, init, training length, bracketing; labels per deciding comparison):** "
            "C1: ") in protocol
    runs = [run_of(r) for r in sweep_records()]
    ratios = sorted(r.result.tokens / r.total_params for r in runs)
    assert ratios[0] < ratios[-1] < 20
    assert "against the ~20 of compute-optimal training (Hoffmann et al. 2022): " in method
    assert "× short of it" in method


def test_the_claims_table_has_one_short_row_per_claim(sweep):
    _, text = sweep
    table = text[text.index("## Claims"):].split("\n### ")[0]
    rows = [line for line in table.splitlines() if line.startswith("| C")]
    assert len(rows) == len(CLAIMS) and all(len(r) < 200 for r in rows), max(rows, key=len)
    assert "| claim | verdict | deciding effect, 95% CI | decided in | labels | n |" in table


def test_lr_protocols_are_those_of_the_deciding_comparisons():
    details = ["- a, lr 0.001: +0.1 (n = 3)", "  - lr protocol: one lr", "  - sign holds",
               "- a, each at its best lr: +0.2 (n = 3) ← decides the verdict", "  - lr protocol: tuned", "- other"]
    assert method.lr_protocols(details) == ["tuned"]
    assert method.lr_protocols(details[:3]) == ["one lr"]  # nothing marked: every protocol recorded
    assert method.lr_protocols(["- no comparison"]) == []


def test_training_length_says_how_far_short_of_20_tokens_per_parameter():
    runs = [run_of(make_record("relu", s, 3.0)) for s in (0, 1)]
    ratio = runs[0].result.tokens / runs[0].total_params
    line = method.training_length_line(runs)
    assert f"trained {ratio:.2g} tokens per parameter" in line and f"{20 / ratio:.0f}× short of it" in line
    assert method.training_length_line([]).endswith("no run records its tokens and parameters.")


def test_each_part_of_a_claim_is_shown_with_its_verdict(sweep):
    _, text = sweep
    c5 = text[text.index("### C5: "):text.index("### C6: ")]
    assert "**Parts:**" in c5
    assert re.search(r"^- relu about half at init \(the article's snippet: random weights\): "
                     r"\*(supported|contradicted|inconclusive)\*", c5, re.M)
    assert re.search(r"^- relu about half after training \(lr [\d.]+\): \*", c5, re.M)
    assert re.search(r"^- gelu no hard zeros after training \(fan_in init, lr [\d.]+\): \*", c5, re.M)


def test_every_named_figure_exists_and_only_those(sweep):
    root, text = sweep
    named = set(re.findall(r"\]\(figures/([\w.]+\.png)\)", text))
    on_disk = {p.name for p in (root / "figures").glob("*.png")}
    assert named == on_disk and len(named) == 6
    assert all((root / "figures" / name).stat().st_size > 1000 for name in named)


def test_unusable_runs_are_listed_with_their_reason(sweep):
    _, text = sweep
    unused = text[text.index("## Runs not used"):text.index("## Provenance")]
    for needle in ("corrupt-s0 | corrupt | ", "never-started-s0 | missing | no result.json",
                   "| failed | failed: RuntimeError: out of memory", "| running | still running (step ",
                   "| diverged | diverged: validation loss became nan"):
        assert needle in unused, needle


def test_results_jsonl_holds_the_finished_and_diverged_runs_as_portable_run_results(sweep):
    root, _ = sweep
    lines = (root / "results.jsonl").read_text().splitlines(keepends=True)
    assert len(lines) == len(sweep_records()) + 1  # the finished runs and the diverged one
    names = [json.loads(line)["run_name"] for line in lines]
    assert names == sorted(names)
    for line, name in zip(lines, names):
        on_disk = RunResult.read(root / name)
        assert line == on_disk.jsonl_line()  # the one serialiser: no run_dir, no resumed_from_step
        assert "run_dir" not in json.loads(line) and json.loads(line)["config"] == on_disk.config


def test_report_rebuilt_from_its_results_jsonl_has_the_same_claims_and_records(sweep, tmp_path):
    root, text = sweep
    rebuilt = report.write_report(root / "results.jsonl", tmp_path / "published", bench_files=[]).read_text()
    assert claims_section(rebuilt) == claims_section(text)
    assert "make sweep EXP=synthetic" in rebuilt  # the sweep command travels with the report
    assert (tmp_path / "published" / "results.jsonl").read_bytes() == (root / "results.jsonl").read_bytes()
    assert "this copy rebuilds from its own results with `python -m ffnbench.report " \
           f"{tmp_path / 'published' / 'results.jsonl'}`" in rebuilt


def test_a_report_rebuilt_in_place_leaves_its_published_results_jsonl_as_it_was(sweep, tmp_path):
    root, _ = sweep
    published = tmp_path / "results.jsonl"
    lines = (root / "results.jsonl").read_text().splitlines(keepends=True)
    old = json.loads(lines[0])
    old["schema"] = 1  # a record of an earlier schema: read through ffnbench.runs.migrate, never rewritten
    published.write_text(json.dumps(old) + "\n" + "".join(lines[1:]))
    before = published.read_bytes()
    report.write_report(published, bench_files=[])
    assert published.read_bytes() == before and (tmp_path / "REPORT.md").exists()


def test_one_seed_sweep_has_no_intervals_and_no_trained_verdicts(tmp_path):
    root = write_sweep(tmp_path / "one", sweep_records(seeds=(0,)))
    text = report.write_report(root, bench_files=[]).read_text()
    assert "n/a (1 seed)" in text and "One seed only" in text
    lines = re.findall(r"^\| C\d+ \|.*$", claims_section(text), re.M)
    assert [line.split("|")[1].strip() for line in lines] == list(CLAIM_IDS)
    for claim, line in zip(CLAIMS, lines):
        if claim.kind != "analytic":  # exact: decided without runs
            assert "**inconclusive**" in line, line


def test_a_missing_number_prints_a_dash_in_the_tables(tmp_path):
    records = [make_record(a, s, 3.0 + 0.01 * s) for a in ("relu", "gelu") for s in (0, 1)]
    for rec in records:
        rec["throughput"]["mfu"] = None  # e.g. a CPU with no known peak
    text = report.write_report(write_sweep(tmp_path / "s", records), bench_files=[]).read_text()
    rows = re.findall(r"^\| (?:relu|gelu)-b4-nobias \|.*$", text, re.M)
    assert rows and all(row.split(" | ")[11] == "–" for row in rows[:2])  # the MFU column


# ---- comparisons ------------------------------------------------------------------------------------------


def test_variants_sort_in_variant_order_and_the_largest_comparison_leads():
    acts = ("swiglu", "relu", "gelu")
    runs = [run_of(make_record(a, s, 3.0)) for a in acts for s in (0, 1)]
    runs += [run_of(make_record("relu", 0, 3.0, lr=1e-2))]  # a second comparison, smaller
    order = sorted(acts, key=list(VARIANTS).index)
    assert order != list(acts) and list(dict.fromkeys(r.act for r in sorted(runs, key=variant_order))) == order
    (_, lr, variants), (_, other_lr, _) = comparisons(runs)
    assert (lr, other_lr) == (3e-3, 1e-2) and list(variants) == [f"{a}-b4-nobias" for a in order]
    assert {r.lr for r in primary_runs(runs)} == {3e-3} and len(primary_runs(runs)) == 6


def test_the_figures_main_comparison_is_the_base_settings_even_when_another_init_has_more_runs():
    """fan_in (the base setting: the in-band init nearest the band's centre) with 2 seeds of 3 variants; scaled 0.55
    with 5 seeds of 2 variants: it has more usable runs, but the figures read the base setting, where the verdicts are
    decided."""
    runs = [run_of(make_record(a, s, 3.0)) for a in ("swiglu", "relu", "gelu") for s in (0, 1)]
    runs += [run_of(make_record(a, s, 2.9, config={"model.init": "scaled", "model.init_gain": 0.55}))
             for a in ("relu", "gelu")
             for s in range(5)]
    assert comparisons(runs)[0][2].keys() == {"relu-b4-nobias", "gelu-b4-nobias"}  # the largest table leads
    assert {r.factor("model.init") for r in primary_runs(runs)} == {"fan_in"} and len(primary_runs(runs)) == 6


# ---- command line -----------------------------------------------------------------------------------------


def test_cli_missing_directory_exits_2_with_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ffnbench.report", str(tmp_path / "nope")],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.startswith("ffnbench: error: ") and len(out.stderr.strip().splitlines()) == 1
    assert "make sweep" in out.stderr and "Traceback" not in out.stderr


def test_cli_writes_the_report(tmp_path, capsys):
    root = write_sweep(tmp_path / "s", [make_record(a, s, 3.0 + 0.01 * s) for a in ("relu", "gelu") for s in (0, 1)])
    report.main([str(root), "--out", str(tmp_path / "out")])  # what `ffnbench report` calls
    assert capsys.readouterr().out == f"report: {tmp_path / 'out' / 'REPORT.md'}\n"
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"REPORT.md", "results.jsonl", "figures", "sweep.json"}


@pytest.mark.parametrize(("argv", "needle"), [(["x", "--wandb", "a/b"], "not both"),
                                              (["--group", "g"], "need --wandb"),
                                              (["--wandb", "nope"], "ENTITY/PROJECT")])
def test_cli_refuses_inconsistent_arguments(argv, needle, capsys):
    with pytest.raises(SystemExit) as exit_:
        report.main(argv)
    assert exit_.value.code == 2 and needle in capsys.readouterr().err


def test_tuned_variants_make_one_comparison_and_the_learning_rates_section_says_why(tmp_path):
    grid = (("relu", 1e-3, 3.20), ("relu", 3e-3, 3.10), ("relu", 1e-2, 3.15), ("gelu", 1e-3, 3.00),
            ("gelu", 3e-3, 3.05), ("gelu", 1e-2, None))
    tuning = [make_record(act, s, None if loss is None else loss + 0.001 * s, lr=lr, config={"tuning": True},
                          status="finished" if loss is not None or s == 7 else "diverged")
              for s in (7, 8) for act, lr, loss in grid]
    judged = ([make_record("relu", s, 3.1 + 0.001 * s, lr=3e-3) for s in (0, 1, 2)]
              + [make_record("gelu", s, 3.0 + 0.002 * s, lr=1e-3) for s in (0, 1, 2)])
    runs = [run_of(r) for r in tuning + judged]
    (_, lr, variants), = comparisons(runs)
    assert lr is None and list(variants) == ["relu-b4-nobias", "gelu-b4-nobias"]
    assert {r.role for r in primary_runs(runs)} == {"judged"} and len(primary_runs(runs)) == 6
    text = report.write_report(write_sweep(tmp_path / "s", tuning + judged), bench_files=[]).read_text()
    section = text.split("## Learning rates", 1)[1].split("\n## ", 1)[0]
    relu = next(line for line in section.splitlines() if line.startswith("| relu-b4-nobias"))
    assert "| 0.001: 3.208 (n=2); 0.003: 3.107 (n=2); 0.01: 3.157 (n=2) | **0.003** |" in relu
    assert relu.endswith("| lowest median final loss over tuning seeds 7, 8 |")
    gelu = next(line for line in section.splitlines() if line.startswith("| gelu-b4-nobias"))
    assert "0.01: ∞ (n=2) (2 diverged)" in gelu and "| **0.001** |" in gelu  # finished without a loss = diverged
    assert ("half or more of the seeds diverged at 0.01 (never chosen) — **optimum not bracketed (at the lower edge "
            "of 3 lrs)**") in gelu
    assert "each variant at the lr its tuning runs chose" in text and "| relu-b4-nobias (lr 0.003) |" in text


def test_cost_aware_views_read_each_pair_at_the_cheaper_runs_flops_and_never_at_a_sweeps_wall_time(tmp_path):
    """swiglu's loss curve is 0.05 below gelu's at every token, but it costs 1.5x the FLOPs: at equal FLOPs it is
    read earlier on gelu's (steeper) curve. The runs' tokens/s (load on a shared machine) make no view."""
    from ffnbench.report import costs
    from ffnbench.report.costs import at_equal_cost, flops_axis

    def curved(act, seed, offset, flops, tps):
        rec = make_record(act, seed, 3.0 + offset, tokens_per_s=tps)
        rec["curve"] = [{"step": i, "tokens": t, "val_loss": 4.0 - t / 1000 + offset}
                        for i, t in enumerate((0, 500, 1000))]
        rec["flops"] = {**rec["flops"], "per_token_training": flops}
        return run_of(rec)

    gelu = [curved("gelu", s, 0.0, 100.0, 2000.0) for s in (0, 1, 2)]
    swiglu = [curved("swiglu", s, -0.05 + 0.001 * s, 150.0, 1000.0) for s in (0, 1, 2)]
    params, flops = (at_equal_cost(gelu, swiglu, axis) for axis in (None, flops_axis))
    assert params.mean == pytest.approx(-0.049)  # both at 1000 tokens
    assert flops.mean == pytest.approx(-0.049 + (1000 - 1000 / 1.5) / 1000)  # gelu at 1000 vs swiglu at 667 tokens
    assert flops.n == 3
    assert costs.HEADER == ["variant − reference", "equal params (end of training)", "equal training FLOPs"]
    assert not hasattr(costs, "seconds_axis")


# ---- tuning runs in the tables, the summary and the Learning rates section -----------------------------------


def tuning_record(act, seed, lr, loss, status="finished"):
    return make_record(act, seed, loss, lr=lr, config={"tuning": True}, status=status)


def test_a_run_at_its_tuned_lr_is_in_its_own_lr_comparison_too():
    """relu's tuned lr is 0.004, gelu's 0.001; an explicit grid at 0.004 must show both, not gelu alone."""
    tuning = [tuning_record(act, s, lr, loss + 0.001 * s) for s in (100, 101)
              for act, lr, loss in (("relu", 1e-3, 3.2), ("relu", 4e-3, 3.1), ("gelu", 1e-3, 3.0), ("gelu", 4e-3, 3.1))]
    judged = [make_record(act, s, 3.0 + 0.001 * s, lr=lr) for s in (0, 1, 2)
              for act, lr in (("relu", 4e-3), ("gelu", 4e-3), ("gelu", 1e-3))]
    runs = [run_of(r) for r in tuning + judged]
    tables = {lr: variants for _, lr, variants in comparisons(runs)}
    assert [lr for _, lr, _ in comparisons(runs)] == [None, 4e-3]  # a tie: the tuned comparison leads
    assert list(tables[4e-3]) == ["relu-b4-nobias", "gelu-b4-nobias"]
    assert {label: {r.lr for r in rs} for label, rs in tables[None].items()} == {"relu-b4-nobias": {4e-3},
                                                                                 "gelu-b4-nobias": {1e-3}}
    assert len(primary_runs(runs)) == 6 and {(r.act, r.lr) for r in primary_runs(runs)} == {("relu", 4e-3),
                                                                                            ("gelu", 1e-3)}
    runs += [run_of(make_record("swish", s, 3.0, lr=4e-3)) for s in (0, 1, 2)]  # now the grid has more runs
    assert [lr for _, lr, _ in comparisons(runs)] == [4e-3, None]
    assert len(primary_runs(runs)) == 9 and {r.lr for r in primary_runs(runs)} == {4e-3}


def test_cost_aware_views_use_the_final_loss_and_only_the_references_budget():
    def run(act, seed, loss, **kw):
        rec = make_record(act, seed, loss, **kw)
        # the curve's small validation set disagrees with the final validation loss (relu's more than gelu's)
        rec["curve"][-1]["val_loss"] = loss + (0.7 if act == "relu" else 0.5)
        return run_of(rec)

    runs = [run(a, s, loss + 0.01 * s, **kw) for s in (0, 1, 2) for a, loss, kw in
            (("gelu", 3.0, {}), ("relu", 3.1, {}), ("gelu", 2.9, {"width": 8}), ("gelu", 3.05, {"bias": True}))]
    from ffnbench.report.costs import at_equal_cost, costs_section

    gelu, relu = ([r for r in runs if r.label == label] for label in ("gelu-b4-nobias", "relu-b4-nobias"))
    assert at_equal_cost(gelu, relu, None).mean == pytest.approx(0.1)
    text = "\n".join(costs_section(runs))
    rows = [line for line in text.splitlines() if line.startswith("| ") and " − gelu" in line]
    assert [row.split(" | ")[0] for row in rows] == ["| relu-b4-nobias − gelu-b4-nobias"]
    assert rows[0].split(" | ")[1].startswith("+0.1000 ")
    assert "left out, at another parameter count: gelu-b4-bias, gelu-w8-nobias" in text


def test_summary_and_unused_runs_set_the_tuning_runs_apart(tmp_path):
    tuning = [tuning_record(act, s, lr, 3.1 + 0.001 * s) for s in (100, 101) for act in ("relu", "gelu")
              for lr in (1e-3, 3e-3)] + [tuning_record("relu", 100, 1e-2, None, status="diverged")]
    judged = [make_record(act, s, 3.0 + 0.001 * s, lr=1e-3) for s in (0, 1) for act in ("relu", "gelu")]
    text = report.write_report(write_sweep(tmp_path / "s", tuning + judged), bench_files=[]).read_text()
    summary = text.split("\n\n")[1]
    assert summary.startswith("4 finished judged runs of 2 variants (seeds 0, 1), plus 9 lr-tuning runs on seeds "
                              "100, 101 (1 diverged; ")
    assert "0 diverged judged runs and 0 other runs not used" in summary
    unused = text[text.index("## Runs not used"):text.index("## Provenance")]
    row = next(line for line in unused.splitlines() if "lr0.01" in line)
    assert "an lr-tuning run: judged by no statistic" in row and "C4" not in row


def test_the_seeds_for_a_target_halfwidth_say_they_use_the_seed_to_seed_sd_only(sweep):
    _, text = sweep
    results = text[text.index("## Results by comparison"):]
    above = results.split("| variant | Δ loss (nats) |", 1)[0].rsplit("\n\n", 2)[-2]
    assert "seeds for ±0.02" in above and "seed-to-seed SD of the differences only" in above
    assert "validation-window part of the interval does not shrink with more seeds" in above


def test_the_choice_says_when_the_median_and_the_mean_disagree_and_no_lr_says_what_happened():
    from ffnbench.claims.lr_protocol import describe_choice
    from ffnbench.report.lrs import lr_section

    # 0.003 has the lowest median (3.0); seed 9's plateau (3.9) moves its mean above 0.01's
    grid = [(1e-3, 3.2, 3.2, 3.2), (3e-3, 3.0, 3.0, 3.9), (1e-2, 3.1, 3.1, 3.1)]
    runs = [run_of(tuning_record("relu", s, lr, loss)) for lr, *losses in grid for s, loss in zip((7, 8, 9), losses)]
    assert describe_choice(runs, 3e-3) == ("lowest median final loss over tuning seeds 7, 8, 9; the mean would have "
                                           "chosen 0.01 (an unstable seed moves a mean, not a median)")
    walled = [*runs, *(run_of(tuning_record("relu", s, 2e-2, None, status="diverged")) for s in (7, 8))]
    assert "half or more of the seeds diverged at 0.02 (never chosen)" in describe_choice(walled, 3e-3)
    edge = [r for r in runs if r.lr != 1e-3]
    assert describe_choice(edge, 3e-3).endswith("— **optimum not bracketed (at the lower edge of 2 lrs)**: a better lr "
                                                "may lie beyond")
    failed = [run_of(tuning_record("gelu", 7, 1e-3, None, status="diverged")),
              run_of(tuning_record("gelu", 8, 1e-3, None, status="failed"))]
    row = next(line for line in lr_section(failed) if line.startswith("| gelu-b4-nobias"))
    assert "| none | no lr with a finite median (1 of 2 tuning runs diverged, 1 failed or other): its judged runs " \
           "cannot run |" in row
    assert "| 0.001: ∞ (n=2) (1 diverged, 1 failed or other) |" in row  # the failed run is counted where it ran


def test_summary_counts_the_runs_at_the_chosen_lrs_neighbours_apart(tmp_path):
    """Judged, lr-tuning and neighbour runs add up to every run loaded: relu chooses 0.002 and each judged seed also
    ran at its neighbours 0.00141 and 0.00283 (lr_protocol.judge_neighbours)."""
    tuning = [tuning_record("relu", s, lr, loss + 0.001 * s) for s in (100, 101)
              for lr, loss in ((1e-3, 3.2), (2e-3, 3.0), (4e-3, 3.1))]
    flag = {"lr_protocol.judge_neighbours": True}
    judged = [make_record("relu", s, 3.0 + 0.001 * s + abs(lr - 2e-3), lr=lr, config=flag)
              for s in (0, 1) for lr in (2e-3, 1.41e-3, 2.83e-3)]
    judged[-1] = make_record("relu", 1, None, lr=2.83e-3, config=flag, status="diverged")
    text = report.write_report(write_sweep(tmp_path / "s", tuning + judged), bench_files=[]).read_text()
    summary = text.split("\n\n")[1]
    assert summary.startswith("2 finished judged runs of 1 variants (seeds 0, 1), plus 6 lr-tuning runs on seeds "
                              "100, 101 (0 diverged; "), summary
    assert ", plus 4 runs of the judged seeds at the chosen lrs' neighbours (1 diverged; " in summary, summary
    assert "0 diverged judged runs and 0 other runs not used" in summary, summary
