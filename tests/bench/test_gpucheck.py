"""ffnbench.bench.gpucheck (`make gpu-check`): what can be checked without a GPU."""

import json
from pathlib import Path

import pytest
import torch

from ffnbench.bench import gpucheck


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a machine without a GPU")
def test_gpu_check_on_a_cpu_exits_2_with_one_line(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        gpucheck.main(["--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1
    assert err.startswith("ffnbench: error: make gpu-check needs a CUDA GPU; none is visible here (")
    assert not any(tmp_path.iterdir())
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    assert "\ngpu-check: " in makefile and "-m ffnbench.bench.gpucheck" in makefile


def test_compile_problems_are_read_from_dynamo_counters():
    """Real dynamo on the CPU (the eager backend: graphs are captured, nothing is code-generated)."""
    from ffnbench.bench.gpucheck import compile_problems, dynamo_snapshot

    torch._dynamo.reset()

    def block(x):
        return torch.relu(x) * 2

    compiled = torch.compile(block, backend="eager", dynamic=False)
    start = dynamo_snapshot()
    compiled(torch.ones(4))
    warm = dynamo_snapshot()
    compiled(torch.ones(4))
    assert compile_problems(start, warm, dynamo_snapshot()) == []  # compiled once, in warm-up
    compiled(torch.ones(8))  # a new shape after warm-up: a recompile in the timed steps
    assert compile_problems(start, warm, dynamo_snapshot()) == ["1 graph(s) compiled after warm-up (a recompile in "
                                                                "the timed steps)"]

    def broken(x):
        x = torch.relu(x)
        torch._dynamo.graph_break()
        return x * 2

    start = dynamo_snapshot()
    torch.compile(broken, backend="eager")(torch.ones(4))
    end = dynamo_snapshot()
    assert any("graph break(s), part of a block ran eager" in p for p in compile_problems(start, end, end))
    assert compile_problems(end, end, end) == ["nothing was compiled: every block ran eager"]
    gave_up = {**end, "frames": end["frames"] + 2, "frames_ok": end["frames_ok"] + 1, "graphs": end["graphs"] + 1}
    assert compile_problems(end, gave_up, gave_up) == ["1 frame(s) dynamo gave up on ran eager"]
    torch._dynamo.reset()


@pytest.mark.slow
def test_the_compile_watch_passes_a_compiled_cpu_run(quick_session):
    """gpu-check's training check, driven through train() on the CPU with the micro model: every block compiled,
    no recompile after warm-up, a finished run with its throughput."""
    row = gpucheck.train_check(quick_session, "micro", steps=6, warmup=2)
    assert row["problems"] == [] and row["status"] == "finished" and row["tokens_per_s"] > 0
    assert row["dynamo"]["graphs"] > 0


def test_the_gpu_check_record_goes_under_the_gpus_name(tmp_path):
    assert gpucheck.gpu_label("NVIDIA H200 NVL") == "nvidia-h200-nvl"
    assert gpucheck.gpu_label("Tesla V100-SXM2-32GB") == "tesla-v100-sxm2-32gb"
    path = gpucheck.write_record(tmp_path / "nvidia-h200", {"ok": True, "mfu": float("nan")})
    assert path == tmp_path / "nvidia-h200" / "gpucheck.json"
    assert json.loads(path.read_text()) == {"ok": True, "mfu": None}
    summary = gpucheck.summarize({"alignment": {"rows": [{"d_ff": 682, "ms_median": 1.5, "ns_per_param": 2.0}]}})
    assert summary == {"alignment": [{"d_ff": 682, "ms": 1.5, "ns_per_param": 2.0}]}


def test_the_gpu_checks_sizes_cut_make_benchs_gpu_sizes():
    from ffnbench.bench import cli

    full, cut = cli.sizes_for(False, True), gpucheck.check_sizes(False)
    assert set(cut) == set(full) and cut["variants"] == full["variants"]
    assert cut["overhead"].models == ("small",) and cut["overhead"].reps < full["overhead"].reps
    assert cut["alignment"].reps < full["alignment"].reps
    assert gpucheck.check_sizes(True) == cli.sizes_for(True, True)


def test_gpu_check_trains_the_gpu_sweeps_own_shape():
    """The sweeps run `small` with an 8192-token BPE vocabulary (conf/experiment/_gpu.yaml), where the head and loss
    weigh; gpu-check's MFU came from Shakespeare bytes (vocab 256) alone, where the head costs nothing."""
    from ffnbench.config.compose import compose

    model, extra = gpucheck.sweep_shape()
    sweep = compose(["experiment=activations"])
    shape = compose([f"model={model}", *extra])
    assert (shape.model.name, shape.data.tokenizer, shape.data.vocab_size, shape.data.batch_size) == (
        sweep.model.name, sweep.data.tokenizer, sweep.data.vocab_size, sweep.data.batch_size)
    assert shape.data.batch_size != compose([]).data.batch_size  # the sweeps' 64, not train.yaml's default


def test_the_ddp_check_reads_the_world_size_that_trained_not_the_devices_asked_for():
    finished = {"status": "finished", "hardware": {"devices": 2, "world_size": 2}}
    assert gpucheck.ddp_problems(0, finished, "", asked=2) == []
    one = {"status": "finished", "hardware": {"devices": 2, "world_size": 1}}  # SLURM's environment trained one
    assert "trained on 1 process(es), asked for 2" in gpucheck.ddp_problems(0, one, "", asked=2)[0]
    assert "failed (exit 1)" in gpucheck.ddp_problems(1, {}, "boom", asked=2)[0]
