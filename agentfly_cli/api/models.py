"""The model aliases agentfly builds locally (``tiny``, ``smollm2``; never a hub download)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def model_aliases() -> list[dict[str, Any]]:
    """Every alias ``--model`` accepts, by name: its description, whether it is built in the
    cache, and the folder it is (or would be) built in."""
    from agentfly_cli.models.resolve import alias_folder, known_models

    items = []
    for name, alias in sorted(known_models().items()):
        folder = alias_folder(alias)
        items.append(
            {
                "name": name,
                "description": alias.description,
                "built": (folder / ".complete").exists(),
                "path": str(folder),
            }
        )
    return items


def build_model(spec: str) -> Path:
    """The local folder of ``spec``: an existing path, or an alias, built on first use."""
    from agentfly_cli.models import resolve_model

    return resolve_model(spec)
