"""depnmt: syntax-aware Transformer NMT toolkit."""

__version__ = "0.1.0"
