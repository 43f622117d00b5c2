"""The repository's folders as the tests see them, and scripts imported by their path."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures"  # the files the tests read (servers, plugins, data)


def load_script(relative_path: str):
    """A script of the repository (benchmarks/, scripts/) imported as a module by its path."""
    path = REPO_ROOT / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
