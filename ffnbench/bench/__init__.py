"""The performance benchmarks (`make bench`, `python -m ffnbench.bench`; docs/benchmarks.md). One concern per module:

    cli.py         the command line: BENCHMARKS (the benchmark modules, in order), the device, the machine block,
                   the JSON files
    session.py     what one invocation runs on and how big (BenchSession, the size presets)
    timing.py      interleaved repetitions, paired ratios, quartiles, timed calls, the load meter
    contenders.py  the real pipeline (train()) and the hand-written reference loop it is measured against
    render.py      how a record is printed: the shared table cells and the block of title, tables and notes
    overhead.py  mfu.py  variants.py  alignment.py  startup.py  parallel.py
                   one benchmark each: NAME, TITLE, SUMMARY, SIZES (by preset), measure(session) → its record
                   (settings, load, rows, notes, ...), tables(record) → what is printed of it
    overhead_compare.py  overhead_profile.py  overhead_floor.py
                   the overhead benchmark's parts: one model's row, the profile, Lightning's own loop
    gpucheck.py    `make gpu-check`: a GPU machine end to end (its plan, the checklist, the record; --cpu-smoke)
    gpucheck_plan.py   what one gpu-check does: the sweeps' shapes, on a GPU or (--cpu-smoke) at micro scale
    gpucheck_train.py  gpu-check's training check: sync and fixed-cost watches of one train() run
    compile_watch.py   what dynamo did in a run (graph breaks, late or dynamic graphs, recompiles), for gpu-check
    gpucheck_price.py  the record's `price` block (MFU and a run's fixed overhead per model group)
"""

from ffnbench.bench.cli import main

__all__ = ["main"]
