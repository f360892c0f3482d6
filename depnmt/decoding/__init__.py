"""Decoding: beam search and its limits, translate, ensembles, forced decoding, CTranslate2 export
and decoding."""
