"""ffnbench.bench.compile_watch: gpu-check's judgements of what dynamo did in a run, on real dynamo and the CPU."""

import pytest
import torch

from ffnbench.bench import compile_watch as cw


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_compile_problems_are_read_from_dynamo_counters(fresh_dynamo):
    """Real dynamo on the CPU (the eager backend: graphs are captured, nothing is code-generated)."""
    def block(x):
        return torch.relu(x) * 2

    compiled = torch.compile(block, backend="eager", dynamic=False)
    start = cw.dynamo_snapshot()
    compiled(torch.ones(4))
    warm = cw.dynamo_snapshot()
    compiled(torch.ones(4))
    assert cw.compile_problems(start, warm, cw.dynamo_snapshot()) == []  # compiled once, in warm-up
    compiled(torch.ones(8))  # a new shape after warm-up: a recompile in the timed steps
    assert cw.compile_problems(start, warm, cw.dynamo_snapshot()) == ["1 graph(s) compiled after warm-up (a "
                                                                      "recompile in the timed steps)"]

    def broken(x):
        x = torch.relu(x)
        torch._dynamo.graph_break()
        return x * 2

    start = cw.dynamo_snapshot()
    torch.compile(broken, backend="eager")(torch.ones(4))
    end = cw.dynamo_snapshot()
    assert any("graph break(s), part of a block ran eager" in p for p in cw.compile_problems(start, end, end))
    assert cw.compile_problems(end, end, end) == ["nothing was compiled: every block ran eager"]
    gave_up = {**end, "frames": end["frames"] + 2, "frames_ok": end["frames_ok"] + 1, "graphs": end["graphs"] + 1}
    assert cw.compile_problems(end, gave_up, gave_up) == ["1 frame(s) dynamo gave up on ran eager"]


def test_a_run_may_compile_one_training_graph_per_function_and_no_more():
    """result.json's compile record (compiling.CompileWatch.record) as a compiled micro run wrote it when step 0's
    validation ran under inference_mode and fit's under no_grad (issue 42: 7 graphs, 5 recompiles, 2 functions: the
    blocks' forward and the loss head's), as it wrote it with one compiled evaluation graph per function (2 recompiles),
    and as a run that evaluates eager writes it."""
    three_each = {"enabled": True, "compiled": True, "frames": 7, "eager_frames": 0, "graphs": 7, "graph_breaks": 0,
                  "recompiles": 5}
    assert cw.graph_problems(three_each) == ["7 graphs and 5 recompiles for 2 compiled function(s) (result.json's "
                                             "compile): more than one training graph per function"]
    assert cw.graph_problems({**three_each, "frames": 4, "graphs": 4, "recompiles": 2}) == [
        "4 graphs and 2 recompiles for 2 compiled function(s) (result.json's compile): more than one training graph "
        "per function"]
    assert cw.graph_problems({**three_each, "frames": 2, "graphs": 2, "recompiles": 0}) == []  # training only
    assert cw.graph_problems({"enabled": False}) == [] and cw.graph_problems(None) == []
    assert cw.graph_problems({**three_each, "recompiles": None}) == []  # an older torch: not counted
    per_frame = {**three_each, "compiles_per_frame": [3, 4]}  # counted frame by frame: judged so
    assert cw.graph_problems(per_frame) == ["2 of 2 compiled functions compiled 3, 4 times (result.json's "
                                            "compile.compiles_per_frame [3, 4]): more than one training graph each"]
    assert cw.graph_problems({**per_frame, "compiles_per_frame": [1, 1]}) == []
    skewed = {**per_frame, "frames": 3, "graphs": 3, "recompiles": 1, "compiles_per_frame": [2, 1]}
    assert cw.graph_problems(skewed)[0].startswith("1 of 2 compiled functions compiled 2 times")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))


def test_a_graph_compiled_with_a_symbolic_batch_is_found(fresh_dynamo):
    """Defect 6 of issue 42 as dynamo does it: a block validated on a smaller batch than it trains on is recompiled
    for training with the batch dimension symbolic (automatic dynamic shapes); torch's compilation records show it.
    With the same batch in both, every graph is static."""
    def run(val_batch: int) -> dict:
        torch._dynamo.reset()
        block = Block()
        block.compile(backend="aot_eager")
        since = cw.compilation_ids()
        with torch.no_grad():
            block(torch.ones(val_batch, 3, 4))
        for _ in range(2):
            block(torch.ones(5, 3, 4)).sum().backward()
        return cw.compile_summary(cw.compilations(since), first_step_end=None)

    smaller = run(val_batch=2)
    assert smaller["compilations"] == 2 and smaller["dynamic_graphs"] == 1 and smaller["seconds"] > 0
    assert smaller["dynamic_where"] == ["forward (0/1)"] and smaller["seconds_after_first_step"] == 0
    assert run(val_batch=5)["dynamic_graphs"] == 0
