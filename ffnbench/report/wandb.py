"""The report's W&B side: runs read from a W&B project instead of the disk (`--wandb ENTITY/PROJECT`), each
mapped to a RunResult, and a W&B report with the same panels as REPORT.md's figures (`--wandb-report`).

Everything here needs the network and credentials, so it checks for them first and fails at once with the
fix; `wandb` and `wandb_workspaces` are imported only when used."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from ffnbench.claims import ClaimResult
from ffnbench.errors import FFNBenchError
from ffnbench.report.load import Loaded, Unused, checked, classify
from ffnbench.runs.migrate import migrate_config
from ffnbench.runs.result import METRICS, RunResult, ffn_record, model_record, summary_key

# W&B run states → result.json statuses (a W&B summary's own "status", logged by fit.py, wins)
WANDB_STATES = {"finished": "finished", "running": "running", "crashed": "failed", "failed": "failed",
                "killed": "failed"}


def check_wandb_online() -> None:
    """Fail at once, with the fix, wherever the W&B API cannot answer: offline mode, no credentials, or no
    route to the server (a short socket probe, so an offline machine does not sit in the client's retries)."""
    from ffnbench.data.tokenizer import unreachable
    from ffnbench.training.loggers import has_wandb_credentials, wandb_host

    mode = os.environ.get("WANDB_MODE", "").lower()
    if mode in ("offline", "disabled", "dryrun"):
        raise FFNBenchError(f"--wandb reads runs through the W&B API, but WANDB_MODE={mode}: unset it and log in "
                            "(`wandb login`), or build the report from disk: `make report SWEEP=<dir>`")
    if not has_wandb_credentials():
        raise FFNBenchError("--wandb: no W&B credentials (set WANDB_API_KEY or run `wandb login`); or build the "
                            "report from disk: `make report SWEEP=<dir>`")
    host, port = wandb_host()
    why = unreachable(host, port)
    if why:
        raise FFNBenchError(f"--wandb: {host} is unreachable ({why}); build the report from disk instead: "
                            "`make report SWEEP=<dir>`")


def require_workspaces() -> None:
    """--wandb-report's package, checked before anything slow: a missing package is the first thing to say."""
    if importlib.util.find_spec("wandb_workspaces") is None:
        raise FFNBenchError("--wandb-report needs the wandb-workspaces package, which is not installed: "
                            "`pip install 'ffnbench[wandb-reports]'`")


def record_from_wandb(run: Any) -> RunResult:
    """A W&B run (its config is the resolved Hydra config, its summary RunResult.wandb_summary) as a RunResult,
    as far as W&B holds it; sizes are recomputed from the config with ffnbench's accounting."""
    from ffnbench.config.schema import model_config
    from ffnbench.data.tokenizer import vocab_size_for
    from ffnbench.model.accounting import count_params
    from ffnbench.model.ffn import size_ffn

    config, summary = migrate_config(dict(run.config)), dict(run.summary)
    mcfg = model_config(config, vocab_size_for(config["data"]))
    tokens_per_step = int(config["data"]["batch_size"]) * mcfg.seq_len
    # One point per step, as result.json's curve: the final validation logs the last step's point a second time.
    points = {int(row["trainer/global_step"]): row
              for row in run.scan_history(keys=["val/loss", "val/bpb", "trainer/global_step"])}
    curve = [{"step": step, "tokens": step * tokens_per_step, "val_loss": row.get("val/loss"),
              "val_bpb": row.get("val/bpb")} for step, row in sorted(points.items())]
    final_stats = {k: summary.get(f"final/ffn_{k}") for k in ("zero_frac", "dead_frac", "never_positive_frac")}
    return RunResult(
        status=summary.get("status") or WANDB_STATES.get(run.state, "failed"),
        name=config.get("name"), run_name=run.name, seed=config.get("seed"), config=config,
        ffn=ffn_record(mcfg.ffn, size_ffn(mcfg.ffn, mcfg.d_model)),
        model=model_record(mcfg, config["model"].get("name")),
        params=count_params(mcfg).as_dict(),
        metrics={k: summary.get(summary_key(k)) for k in METRICS},
        ffn_stats={"init": None, "final": {"mean": final_stats}},
        curve=curve, tokens=summary.get("tokens"),
        throughput={"tokens_per_s": summary.get("perf/tokens_per_s"), "mfu": summary.get("perf/mfu")},
        git={"revision": (run.metadata or {}).get("git", {}).get("commit")},
    )


def load_wandb(path: str, group: str | None) -> Loaded:
    """The runs of W&B project `path` (ENTITY/PROJECT), only those of `group` if given, checked for pooling."""
    check_wandb_online()
    import wandb

    try:
        api_runs = wandb.Api(timeout=30).runs(path, filters={"group": group} if group else None)
        loaded = Loaded([], [], Path(f"wandb:{path}" + (f"/{group}" if group else "")))
        for run in api_runs:
            try:
                loaded.add(classify(record_from_wandb(run), run.name))
            except (FFNBenchError, KeyError, TypeError, ValueError) as e:
                loaded.unused.append(Unused(run.name, str(run.state), f"cannot map this W&B run ({e})"))
    except wandb.errors.CommError as e:
        raise FFNBenchError(f"--wandb {path}: the W&B API failed ({e})") from None
    if not loaded.runs and not loaded.unused:
        raise FFNBenchError(f"--wandb {path}: no runs" + (f" in group {group!r}" if group else ""))
    return checked(loaded)


# The W&B report's panels: (kind, title, x, metrics). Every key is one a run logs (history) or puts in its summary
# (RunResult.wandb_summary, whose keys come from summary_key); a test checks them against a real run's files.
REPORT_PANELS: tuple[tuple[str, str, str | None, tuple[str, ...]], ...] = (
    ("line", "Validation curves", "tokens", ("val/loss",)),
    ("scatter", "Loss vs FFN params", "params/ffn_per_layer", (summary_key("final_val_loss"),)),
    ("bar", "Matched-budget loss", None, (summary_key("final_val_loss"),)),
    ("bar", "Zero fraction / dead units", None, ("final/ffn_zero_frac", "final/ffn_dead_frac")),
    ("bar", "Throughput", None, ("perf/tokens_per_s",)),
)
REPORT_GROUP_BY = "ffn.act"  # a config key: the runs of one FFN are one line / bar


def report_keys() -> set[str]:
    """Every run key (history or summary) the report's panels plot."""
    return {key for _, _, x, metrics in REPORT_PANELS for key in (*([x] if x else []), *metrics)}


def _panel(wr: Any, kind: str, title: str, x: str | None, metrics: tuple[str, ...]) -> Any:
    if kind == "line":
        return wr.LinePlot(title=title, x=x, y=list(metrics))
    if kind == "scatter":
        return wr.ScatterPlot(title=title, x=x, y=metrics[0])
    return wr.BarPlot(title=title, metrics=list(metrics))


def create_wandb_report(path: str, group: str | None, results: list[ClaimResult]) -> str:
    """A W&B report with the same panels as REPORT.md's figures, over the project's runs (grouped by FFN)."""
    require_workspaces()
    import wandb_workspaces.reports.v2 as wr

    entity, project = path.split("/", 1)
    runset = wr.Runset(entity=entity, project=project, name=group or project,
                       filters=f"Config('name') == '{group}'" if group else None,
                       groupby=[f"config.{REPORT_GROUP_BY}"])
    verdicts = "\n".join(f"- **{r.claim.id}** {r.verdict.verdict}: {r.effect or r.verdict.reason}" for r in results)
    report = wr.Report(entity=entity, project=project, title=f"ffnbench: {group or project}",
                       description="FFN claims tested by ffnbench", blocks=[
                           wr.H1("Claims"), wr.MarkdownBlock(text=verdicts),
                           wr.PanelGrid(runsets=[runset], panels=[_panel(wr, *p) for p in REPORT_PANELS])])
    report.save()
    return str(report.url)
