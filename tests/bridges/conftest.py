"""Every bridge test builds its recipes' tasks in its own cache folder."""

import pytest


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    """``$AGENTFLY_CACHE`` for one test: the tasks it builds go there, not to the user's."""
    monkeypatch.setenv("AGENTFLY_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"
