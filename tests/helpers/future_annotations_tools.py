"""Tools defined under ``from __future__ import annotations`` (all hints are strings)."""

from __future__ import annotations

import enum
from typing import Literal

import pydantic

from agentfly_cli import tool


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


class Options(pydantic.BaseModel):
    depth: int = 1


@tool
def search(
    query: str,
    limit: int | None = None,
    tags: list[str] | None = None,
    mode: Mode = Mode.FAST,
    kind: Literal["web", "news"] = "web",
    options: Options | None = None,
) -> dict:
    """Search the corpus.

    Args:
        query: What to look for.
        limit: At most this many hits.
    """
    return {
        "query": query,
        "limit": limit,
        "tags": tags,
        "mode": mode.value,
        "kind": kind,
        "depth": options.depth if options else None,
    }
