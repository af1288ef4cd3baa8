"""ffnbench's Hydra sweeper plugin (Hydra only instantiates plugins that live under `hydra_plugins`)."""
