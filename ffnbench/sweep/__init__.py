"""`make sweep [EXP=quick] [LAUNCHER=...] [ARGS="..."]` → `python -m ffnbench.sweep EXP [--launcher L] -- ARGS`.

Plans the sweep before running it (every run's directory and what will happen to it: skipped because
finished, resumed from its checkpoint, started, or left to the process that is training it now), checks every
job's settings as its run will, refuses what would waste or lose work, runs the grid
through Hydra's multirun (`python -m ffnbench.train -m experiment=EXP ...`) with the chosen launcher,
prints the outcome, and writes the report. Planning imports neither Lightning nor the training code
(ffnbench.runs.rundir makes the run's own decision), so `--dry-run` answers at once.

Modules:
    planning.py   every run of a sweep and what will happen to it (tuned lrs, bracketing), one per resolved config,
                  and the checks that refuse a plan before any work
    jobs.py       the sweep's jobs composed as Hydra's multirun composes them, each one's settings checked once
    keys.py       config.identity's key for thousands of configs (the plan's runs and tuning groups)
    validation.py train's own checks (train.check_run) on each distinct config, before a sweep launches anything
    launchers.py  the Hydra launchers: their overrides, whether the runs train on a CPU, submitit's local GPUs
    arms.py       the robust protocol's arms: a claim experiment's comparisons crossed with the lr, init, length and
                  size cells its verdicts are checked on
    tuning.py     the lr-tuning stage: which tuning runs a variant needs, the lr they choose, bracketing
    progress.py   a sweep's time left
    cost.py       what a sweep costs per arm before it starts (runs, tokens, FLOPs, GPU-hours: MFU and overhead per
                  run, measured by gpu-check or stated defaults), and a budget's cut
    restore.py    a published results.jsonl put back into a sweep's run directories (--restore)
    outcome.py    the table of what each run's result says after the sweep (and why a run refused to start)
    keep.py       what a sweep writes (sweep.json, the report) never holds fewer finished runs than its folder
    cli.py        the command line: the rounds of training (each a Hydra multirun), the manifest, the report
"""
