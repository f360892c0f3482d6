"""The data stages of the pipeline: prepare, parse (and its controls), bpe, multitask."""
