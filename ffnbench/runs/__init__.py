"""A run's record and its directory: RunResult, the run directory's plan and lock, records of
earlier versions, provenance, and the instabilities read off a run's curves."""
