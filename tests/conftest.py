"""Shared fixtures: offline mode, fresh plugin state, and throwaway plugin distributions."""

from __future__ import annotations

import importlib.util
import os
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.realdata_paths import SHARED as REALDATA_SHARED
from tests.realdata_paths import find_realdata, find_tokenizer, missing_reason

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO_ROOT = Path(__file__).resolve().parents[1]


def load_script(relative_path: str):
    """A script of the repository (benchmarks/, scripts/) imported as a module by its path."""
    path = REPO_ROOT / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def _fresh_plugins(monkeypatch):
    """Each test starts with no cached plugin host and no AGENTFLY_* overrides."""
    from agentfly_cli.plugin_host import plugins

    for name in ("AGENTFLY_LOAD_PLUGINS", "AGENTFLY_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    plugins.reset_plugin_host()
    yield
    plugins.reset_plugin_host()


@pytest.fixture
def make_plugin(tmp_path, monkeypatch) -> Callable[..., str]:
    """Write an installed-looking plugin distribution (module + dist-info) onto sys.path.

    Returns the distribution name. ``source`` is the module's code; the entry point in the
    ``agentfly`` group points at that module.
    """
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    monkeypatch.syspath_prepend(str(site))

    def make(
        source: str,
        *,
        dist: str | None = None,
        entry_point: str | None = None,
        version: str = "1.2.3",
    ) -> str:
        token = uuid.uuid4().hex[:8]
        dist = dist or f"agentfly-plugin-test-{token}"
        module = f"agentfly_plugin_test_{token}"
        entry_point = entry_point or f"test_{token}"
        (site / f"{module}.py").write_text(textwrap.dedent(source))
        info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[agentfly]\n{entry_point} = {module}\n")
        return dist

    return make


# The real tokenizers and templates: ../shared/realdata, else build/realdata (`make realdata`).
# Where neither exists REALDATA names the shared folder, which does not exist.
REALDATA = find_realdata() or REALDATA_SHARED


@pytest.fixture(scope="session")
def realdata() -> Path:
    """The real tokenizers and templates (skips, naming `make realdata`, where absent)."""
    folder = find_realdata()
    if folder is None:
        pytest.skip(missing_reason())
    return folder


def real_tokenizer(name: str) -> Path:
    """One real tokenizer's folder (``deepseek_v3``, ``gpt_oss``, ``qwen3``, ...); skips, naming
    `make realdata`, where absent (``../shared/realdata`` lacks the first two)."""
    folder = find_tokenizer(name)
    if folder is None:
        pytest.skip(f"{name}: " + missing_reason())
    return folder


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny test model (2-layer Qwen2, local BPE tokenizer), built once per session."""
    from agentfly_cli.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


def rollout_agent_example(recipe: Path, out: Path) -> list[dict]:
    """``agentfly rollout RECIPE --n 2 --limit 3`` of an agent example (SmolLM2: slow tests);
    its six episodes, each checked to be token-exact and without error."""
    import json

    from typer.testing import CliRunner

    from agentfly_cli.cli.app import build_app

    result = CliRunner().invoke(build_app(), [
        "rollout", str(recipe), "--n", "2", "--limit", "3", "--out", str(out), "--quiet",
    ])  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6 and all(row["token_exact"] and not row["error"] for row in rows)
    return rows


@pytest.fixture
def model_loads(monkeypatch) -> list[str]:
    """Every model resolved or loaded during the test (should stay empty)."""
    import agentfly_cli.models
    import agentfly_cli.models.resolve

    calls: list[str] = []

    def refuse(name, *args, **kwargs):
        calls.append(str(name))
        raise AssertionError(f"a model was resolved: {name}")

    monkeypatch.setattr(agentfly_cli.models, "resolve_model", refuse)
    monkeypatch.setattr(agentfly_cli.models.resolve, "resolve_model", refuse)
    return calls


@pytest.fixture
def weights_loads(monkeypatch) -> list[str]:
    """Every from_pretrained of model weights during the test (should stay empty)."""
    import transformers

    calls: list[str] = []

    def refuse(cls, name, *args, **kwargs):
        calls.append(str(name))
        raise AssertionError(f"model weights were loaded: {name}")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", classmethod(refuse))
    return calls
