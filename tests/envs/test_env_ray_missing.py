"""Without Ray installed, the ray provider says how to install it (runs with or without Ray)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

from agentfly_cli.envs.providers.ray_provider import RayProvider
from agentfly_cli.errors import UserError


def test_missing_ray_is_a_one_line_user_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` raise ImportError
    provider = RayProvider()
    with pytest.raises(UserError) as caught:
        asyncio.run(provider.connect())
    assert str(caught.value) == (
        "provider 'ray' needs Ray: pip install 'agentfly-cli[ray]' (or make install-ray)"
    )
    assert provider.describe() == {"provider": "ray", "address": None}


def test_importing_the_provider_does_not_import_ray():
    code = textwrap.dedent(
        """
        import sys
        import agentfly_cli.envs.providers.ray_provider
        assert "ray" not in sys.modules, "ray imported eagerly"
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True)
