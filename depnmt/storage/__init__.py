"""Model folders and checkpoints: what a trained model is on disk, checked before it is read or
written."""
