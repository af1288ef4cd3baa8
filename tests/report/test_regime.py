"""The regime view (ffnbench.report.regime): each headline difference, best-vs-best, in every (size, length, init)
cell, signed so that positive is the textbook's order, the base setting first; nothing shown for one setting."""

from fixtures.report.synthetic import WIGGLE, make_record
from fixtures.report.synthetic import tuned_arm as arm

from ffnbench.claims import Run
from ffnbench.claims.lr_protocol import mark_neighbours
from ffnbench.report.figures import fig_regime
from ffnbench.report.regime import regime, regime_section

CURVE = (3.40, 3.20, 3.10, 3.15, 3.30)  # every variant's tuning losses: each is best at 0.004
# the fixtures start under fan_in (in the practice band); FAN_IN names the other in-band init the view shows
SHORT, LONG = {"trainer.tokens_per_param": 6}, {"trainer.tokens_per_param": 24}
FAN_IN = {"model.init": "scaled", "model.init_gain": 0.55}


def runs_of(*records: list[dict]) -> list[Run]:
    return [Run.from_record(r) for rs in records for r in rs]


def cell(gelu: float, swiglu: float, relu: float | None = None, config: dict | None = None) -> list[dict]:
    """Judged losses of one cell's variants (linear always 0.2 worse than gelu), all tuned on the same curve."""
    config = {**SHORT, **(config or {})}
    out = arm("gelu", CURVE, gelu, config) + arm("swiglu", CURVE, swiglu, config) + arm("linear", CURVE, gelu + 0.2,
                                                                                        config)
    return out + (arm("relu", CURVE, relu, config) if relu is not None else [])


def test_one_setting_shows_no_regime(tmp_path):
    runs = runs_of(cell(3.10, 3.00, relu=3.20))
    assert len(regime(runs)[0]) == 1
    assert regime_section(runs) == [] and fig_regime(runs, tmp_path) is None


def test_every_cell_gets_each_headline_difference_signed_as_the_textbook_orders_it(tmp_path):
    base = cell(3.10, 3.00, relu=3.20)  # the textbook's order: relu > gelu > swiglu, linear > gelu
    reversed_init = cell(3.00, 3.10, relu=2.95, config=FAN_IN)  # under fan_in: swiglu and gelu swap, relu wins
    longer = cell(3.05, 3.00, config=LONG)  # no relu at 4× tokens
    runs = runs_of(base, reversed_init, longer)
    cells = regime(runs)[0]
    labels = [c.label for c in cells]
    assert labels[0].endswith("6 tok/param, fan_in init")  # the base setting first
    assert any("24 tok/param, fan_in init" in x for x in labels) and \
        any("6 tok/param, scaled 0.55 init" in x for x in labels)
    assert len(cells) == 3

    section = "\n".join(regime_section(runs))
    assert ("| setting | pre-activation std at init | loss(relu) − loss(gelu) | loss(gelu) − loss(swiglu) | "
            "loss(linear) − loss(gelu) | loss(relu) − loss(swish) |") in section
    rows = {line.split(" | ")[0].lstrip("| "): line for line in section.splitlines() if "tok/param" in line}
    base_row = next(v for k, v in rows.items() if "6 tok/param, fan_in" in k)
    std, *cols = base_row.split(" | ")[1:]
    assert cols[0].startswith("+0.10") and cols[1].startswith("+0.10") and cols[2].startswith("+0.20")
    fan_std, *fan_row = next(v for k, v in rows.items() if "scaled 0.55" in k).split(" | ")[1:]
    assert fan_row[0].startswith("-0.05") and fan_row[1].startswith("-0.10")  # the textbook order reversed
    long_row = next(v for k, v in rows.items() if "24 tok" in k).split(" | ")[2:]
    assert long_row[0].strip() == "–" and long_row[1].startswith("+0.05")
    # measured at init: fan_in's 1/√d gives ≈ 1; scaled 0.55 gives ≈ 0.55
    assert 0.9 < float(std) < 1.1 and 0.5 < float(fan_std) < 0.6
    assert fig_regime(runs, tmp_path) == "regime.png" and (tmp_path / "regime.png").stat().st_size > 0


def test_the_view_holds_only_tuned_fresh_seed_comparisons_at_the_textbook_budget():
    # the same cells with FFN biases on, or GPT-2's FFN init swapped for the matched one: not headline cells
    runs = runs_of(cell(3.10, 3.00, relu=3.20), cell(3.10, 3.00, relu=3.20, config={"ffn.bias": True}),
                   cell(3.10, 3.00, relu=3.20, config={"model.ffn_init": "matched"}))
    assert len(regime(runs)[0]) == 1


def test_c7s_bias_cost_has_its_column_near_zero_being_the_textbooks_value(tmp_path):
    """loss(gelu) − loss(gelu+bias) in each cell where gelu ran with and without FFN biases (C7's pairing)."""
    base = cell(3.10, 3.00) + arm("gelu", CURVE, 3.04, {**SHORT, "ffn.bias": True})
    other = cell(3.00, 3.10, config=FAN_IN) + arm("gelu", CURVE, 3.01, {**SHORT, **FAN_IN, "ffn.bias": True})
    runs = runs_of(base, other)
    section = "\n".join(regime_section(runs))
    assert "| loss(gelu) − loss(gelu+bias) |" in section and "biases the textbook's value is about 0" in section
    rows = [line for line in section.splitlines() if "tok/param" in line]
    assert rows[0].split(" | ")[-1].startswith("+0.06") and rows[1].split(" | ")[-1].startswith("-0.01"), rows
    assert fig_regime(runs, tmp_path) == "regime.png"


def test_cells_that_differ_in_depth_alone_come_in_one_order(tmp_path):
    """Two fan_in cells at 2 and 4 layers tie on size, length and init: depth then orders them, whatever order the
    set of cells holds them in (it differs between processes: string hashing is salted)."""
    import ast
    import json
    import os
    import subprocess
    import sys

    records = cell(3.10, 3.00, relu=3.20) + cell(3.00, 3.10, relu=2.95, config=FAN_IN) + \
        cell(3.00, 3.10, relu=2.95, config={**FAN_IN, "model.n_layer": 4})
    (tmp_path / "records.json").write_text(json.dumps(records))
    script = ("import json, sys; from ffnbench.claims import Run; from ffnbench.report.regime import regime; "
              f"runs = [Run.from_record(r) for r in json.load(open({str(tmp_path / 'records.json')!r}))]; "
              "print([c.label for c in regime(runs)[0]])")
    orders = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout
              for seed in range(6)}
    assert len(orders) == 1, orders
    labels = ast.literal_eval(orders.pop())
    assert labels.index(next(x for x in labels if "2 layers" in x and "scaled" in x)) < \
        labels.index(next(x for x in labels if "4 layers" in x and "scaled" in x))


def test_a_side_judged_at_its_neighbours_shows_every_pair_of_judged_lrs():
    """relu alone was judged at its chosen lr's neighbours under fan_in (a follow-up for an optimum not bracketed):
    the section lists relu − gelu at each of relu's judged lrs against gelu's chosen one, and says the sign does
    not hold where relu at its lower neighbour beats gelu; a cell with no neighbour runs gets no line."""
    base = cell(3.10, 3.00, relu=3.20)
    fan_in = cell(3.00, 3.10, relu=3.05, config=FAN_IN)
    near = [make_record("relu", s, loss + WIGGLE["relu"][s], lr=lr,
                        config={**SHORT, **FAN_IN, "lr_protocol.judge_neighbours": True})
            for lr, loss in ((0.00283, 2.95), (0.00566, 3.30)) for s in (0, 1, 2)]
    assert "neighbours" not in "\n".join(regime_section(mark_neighbours(runs_of(base, fan_in))))
    section = "\n".join(regime_section(mark_neighbours(runs_of(base, fan_in, near))))
    lines = [x for x in section.splitlines() if "across the judged lrs" in x]
    assert len(lines) == 1 and \
        "scaled 0.55 init, loss(relu) − loss(gelu): lr-sensitive across the judged lrs" in lines[0]
    assert "gelu 0.004 / relu 0.00283: -0.05" in lines[0] and "gelu 0.004 / relu 0.004: +0.05" in lines[0]
    assert "gelu 0.004 / relu 0.00566: +0.30" in lines[0] and "gelu 0.00283" not in lines[0]
    near = [r for r in near if r["config"]["optim"]["lr"] != 0.00283] + [
        make_record("relu", s, 3.10 + WIGGLE["relu"][s], lr=0.00283,
                    config={**SHORT, **FAN_IN, "lr_protocol.judge_neighbours": True}) for s in (0, 1, 2)]
    section = "\n".join(regime_section(mark_neighbours(runs_of(base, fan_in, near))))
    assert "scaled 0.55 init, loss(relu) − loss(gelu): lr-robust across the judged lrs" in section
    assert "gelu 0.004 / relu 0.00283: +0.10" in section


def test_an_init_gain_is_a_cell_of_its_own_and_its_measured_std_reads_the_gain():
    """model.init=scaled with model.init_gain=g starts the FFN pre-activations at std ≈ g (model.GPT): the regime
    table measures 0.55 ± 0.05 for g = 0.55, and the cells at two gains are two cells, each labelled with its gain."""
    gain = {"model.init": "scaled", "model.init_gain": 0.55}
    runs = runs_of(cell(3.10, 3.00, relu=3.20), cell(3.00, 3.10, relu=2.95, config=gain),
                   cell(3.05, 3.00, config={"model.init": "scaled", "model.init_gain": 0.32}))
    labels = [c.label for c in regime(runs)[0]]
    assert sum("scaled 0.55 init" in x for x in labels) == 1 and sum("scaled 0.32 init" in x for x in labels) == 1
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1].split(" (")[0]  # "0.32 (outside the band)"
            for line in regime_section(runs) if "tok/param" in line}
    assert abs(float(next(v for k, v in rows.items() if "scaled 0.55" in k)) - 0.55) <= 0.05
    assert abs(float(next(v for k, v in rows.items() if "scaled 0.32" in k)) - 0.32) <= 0.05
    assert "0.32 (outside the band)" in "\n".join(regime_section(runs))  # below 0.4: a sensitivity check
