"""bench/ is not a package: its tests load its modules by path, under the names the
scripts import each other by."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[2] / "bench"


def load(name: str, file: str) -> ModuleType:
    """``bench/<file>`` as module ``name``, registered so later imports of it find it."""
    spec = importlib.util.spec_from_file_location(name, BENCH / file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
