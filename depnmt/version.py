"""depnmt's version (the package's ``__version__``; every file depnmt writes records it)."""

__version__ = "0.2.0"
