"""Training and decoding data: datasets, token-count batching and collate, the memory-mapped corpus
cache and its records, the data-loader workers."""
