"""From Hydra configs (conf/) to what a run is built from and what names it.

    compose.py   Hydra composition (compose, compose_many, check_overrides), the resolvers conf/ uses, run_name
    schema.py    the typed, validated specs: FFNSpec, ModelConfig (fixed-budget solving), OptimConfig,
                 TrainerConfig, the seed
    identity.py  what makes two runs the same run: NON_IDENTITY_KEYS, HARDWARE_KEYS, identity_diff, identity_key
    validate.py  the value checks every config block makes (numbers in a range, counts, flags, known keys)
    jobs.py      a sweep's jobs resolved with one composition per set of config groups (the planner's fast path)
"""
