"""What trains a model under Lightning: the LightningModule, its optimizer and schedule, one optimizer step,
deferred reads, the callbacks, the loggers, compile's cache and the throughput monitor."""
