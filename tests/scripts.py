"""The bench scripts (``bench/*.py``) as modules for the tests: they are scripts, not part of
the package."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests.conftest import REPO


def load_script(name: str) -> ModuleType:
    """``bench/NAME.py`` as the module ``bench_NAME``, loaded once."""
    module_name = f"bench_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, REPO / "bench" / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module          # dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[module_name]
