"""Training: the run configuration, the set-up of a run, the loop, evaluation during training,
checkpoints, the memory-mapped data and its cache, distributed training, warm starts."""
