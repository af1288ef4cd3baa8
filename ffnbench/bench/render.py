"""The one renderer of the benchmarks: a benchmark's record (what its JSON file holds) → the titled table(s) and
notes printed on the terminal. Every number goes through tables.fmt and every table through
tables.markdown_table, as in the report."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ffnbench.tables import MISSING, fmt, markdown_table

TITLES = {"overhead": "1. Pipeline overhead", "mfu": "2. MFU", "variants": "3. FFN variants at matched budget",
          "alignment": "4. d_ff alignment (claim C9)", "startup": "5. Startup",
          "parallel": "6. Parallel runs on a CPU"}


def median_iqr(s: Mapping[str, Any] | None, spec: str = ".4g") -> str:
    """A `timing.quartiles` summary as 'median ± IQR/2' (MISSING when there is none)."""
    if not s:
        return MISSING
    return f"{fmt(s['median'], spec)} ± {fmt(s['iqr'] / 2, '.2g')}"


def _goal(met: bool, goal: str) -> str:
    return f"{goal} {'met' if met else 'NOT met'}"


def _speedup(s: Mapping[str, Any] | None) -> str:
    return fmt(s["median"], ".2f") + "×" if s else MISSING


def _table(header: list[str], rows: list[list[Any]]) -> str:
    return "\n".join(markdown_table(header, rows, pad=True))


def overhead_tables(record: Mapping[str, Any]) -> list[str]:
    header = ["model", "tokens/step", "hand ms/step", "hand loop tok/s", "pipeline tok/s", "pipeline ÷ hand",
              "extra ms/step", "goal", "val batch, FFN stats on ÷ off", "FFN stats cost of training"]
    tables = [_table(header, [
        [r["model"] + (" (GPU-sized step)" if r["gpu_sized"] else ""), r["tokens_per_step"],
         median_iqr(r["hand_ms_per_step"], ".3g"), median_iqr(r["hand_tokens_per_s"], ".0f"),
         median_iqr(r["pipeline_tokens_per_s"], ".0f"), median_iqr(r["ratio"], ".3f"),
         fmt(r["pipeline_ms_per_step_extra"], "+.3f"), _goal(r["meets_goal"], f"≥ {r['goal']}"),
         median_iqr(r.get("val_stats_ratio"), ".3f"), fmt(r.get("stats_cost_of_training"), ".2%")]
        for r in record["rows"]])]
    prof = record.get("profile")
    if prof:
        tables.append(_table(
            [f"calls beyond the hand loop's ({prof['model']}, cProfile)", "calls/step", "own ms/step"],
            [[e["function"], fmt(e["calls_per_step"], ".3g"), fmt(e["own_ms_per_step"], ".3f")]
             for e in prof["top_beyond_hand"]]))
    return tables


def mfu_tables(record: Mapping[str, Any]) -> list[str]:
    header = ["model", "tokens/step", "FLOPs/token", "hand tok/s", "hand MFU", "pipeline tok/s", "pipeline MFU",
              "goal"]
    return [_table(header, [
        [r["model"], r["batch_size"] * r["seq_len"], fmt(float(r["flops_per_token"]), ".3g"),
         median_iqr(r["hand_tokens_per_s"], ".0f"), median_iqr(r["hand_mfu"], ".3f"),
         median_iqr(r["pipeline_tokens_per_s"], ".0f"), median_iqr(r["pipeline_mfu"], ".3f"),
         _goal(r["meets_goal"], f"≥ {r['goal']}") if "goal" in r else ""]
        for r in record["rows"]])]


def variants_tables(record: Mapping[str, Any]) -> list[str]:
    rows = record["rows"]
    ref_key = next(k for k in rows[0] if k.startswith("step_vs_"))  # the variant the steps are compared with
    header = ["variant", "d_ff", "FFN params", "layer ms eager", "layer ms compiled", "speed-up", "step ms eager",
              "step ms compiled", "speed-up", f"step ÷ {ref_key.removeprefix('step_vs_')}", "FFN share of step"]
    return [_table(header, [
        [r["variant"], r["d_ff"], fmt(r["ffn_params_per_layer"], ","), median_iqr(r["layer_eager_ms"], ".3g"),
         median_iqr(r["layer_compiled_ms"], ".3g"), _speedup(r["layer_compile_speedup"]),
         median_iqr(r["step_eager_ms"], ".4g"), median_iqr(r["step_compiled_ms"], ".4g"),
         _speedup(r["step_compile_speedup"]), fmt(r[ref_key], ".3f"), fmt(r["ffn_share_of_step"], ".0%")]
        for r in rows])]


def alignment_tables(record: Mapping[str, Any]) -> list[str]:
    rows = record["rows"]
    header = ["d_ff", "multiple of", "ms (fwd+bwd)", "params", "ns/param", "TFLOP/s", "ns/param ÷ 682"]
    return [_table(header, [
        [r["d_ff"], r["multiple_of"], median_iqr(r["ms"], ".4g"), fmt(r["params"], ","),
         fmt(r["ns_per_param"], ".4g"), fmt(r["tflops"], ".3g"),
         fmt(r["ns_per_param"] / rows[0]["ns_per_param"], ".3f")]
        for r in rows])]


def startup_tables(record: Mapping[str, Any]) -> list[str]:
    def event(r: Mapping[str, Any], e: str) -> str:
        return fmt(r["events_s"][e]["median"], ".2f") if e in r["events_s"] else MISSING

    def goal(r: Mapping[str, Any]) -> str:
        return _goal(r["meets_goal"], f"≤ {r['goal_s']:g} s") if "goal_s" in r else ""

    commands = _table(
        ["command", "train() entered s", "data ready s", "first step starts s", "first step done s", "exit s",
         "goal"],
        [[r["what"], event(r, "train_start"), event(r, "data_ready"), event(r, "first_step_start"),
          median_iqr(r["to_first_step_s"], ".2f"), event(r, "exit"), goal(r)] for r in record["rows"]])
    data = _table(["data preparation (in process)", "seconds", "goal"],
                  [[r["what"], median_iqr(r["seconds"], ".3f"), goal(r)] for r in record["data"]])
    return [commands, data]


def parallel_tables(record: Mapping[str, Any]) -> list[str]:
    rows = record["rows"]
    if rows and rows[0].get("what") == "skipped":
        return [f"skipped: {rows[0]['why']}"]
    header = ["runs", "tokens/s per run", "tokens/s together", "wall s", "tokens/s ÷ alone", "runs/h ÷ alone"]
    return [_table(header, [[r["what"], median_iqr(r["tokens_per_s_per_run"], ".3g"),
                             median_iqr(r["tokens_per_s_total"], ".3g"), median_iqr(r["wall_s"], ".3g"),
                             _speedup(r.get("tokens_per_s_ratio")), _speedup(r.get("runs_per_hour_ratio"))]
                            for r in rows])]


TABLES: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "overhead": overhead_tables, "mfu": mfu_tables, "variants": variants_tables, "alignment": alignment_tables,
    "startup": startup_tables, "parallel": parallel_tables}


def render(name: str, record: Mapping[str, Any]) -> str:
    """The block printed for benchmark `name`: '## <title>', its table(s), then its notes indented."""
    lines = [f"\n## {TITLES[name]}\n", "\n\n".join(TABLES[name](record))]
    lines += [f"  {note}" for note in record.get("notes", ())]
    return "\n".join(lines)
