"""The performance benchmarks (`make bench`, `python -m ffnbench.bench`; the benchmarks and the method are in
cli.py's help). One concern per module:

    session.py     what one invocation runs on and how big (BenchSession, Sizes, GOALS)
    timing.py      interleaved repetitions, paired ratios, quartiles, timed calls, the load meter
    contenders.py  the real pipeline (train()) and the hand-written reference loop it is measured against
    overhead.py  mfu.py  variants.py  alignment.py  startup.py
                   one benchmark each: measure(session) returns its record (settings, load, rows, notes, ...)
    render.py      the one renderer: a record → its tables and notes on the terminal
    cli.py         the command line: which benchmarks, the device, the machine block, the JSON files
"""

from ffnbench.bench.cli import main

__all__ = ["main"]
