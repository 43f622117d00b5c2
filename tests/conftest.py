"""Shared fixtures: offline mode, fresh plugin state, and throwaway plugin distributions."""

from __future__ import annotations

import os
import textwrap
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.realdata_paths import find_realdata, missing_reason

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


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


@pytest.fixture(scope="session")
def realdata() -> Path:
    """The real tokenizers and templates (skips, naming `make realdata`, where absent)."""
    folder = find_realdata()
    if folder is None:
        pytest.skip(missing_reason())
    return folder


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """The tiny test model (2-layer Qwen2, local BPE tokenizer), built once per session."""
    from agentfly_cli.models.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"))


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
