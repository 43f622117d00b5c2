"""``search_recall``: the share of a multi-hop question's documents that the agent's searches
brought back.

A question of the ``search_qa`` recipe lists its ``hops``: the title of each document on the
way to the answer (``{"query": "Vell Fair", ...}``). A hop counts as found when a successful
``search`` call showed its document (an observation line ``N. Title: ...``). Weighted beside
the answer's EM and F1, it gives a group of chains that all answer wrong a spread (the chain
that searched one hop further scores higher), which keeps RL from learning to stop searching
early on questions of three hops (docs/learning.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentfly_cli.components.rewards import reward
from rewards_builtin.calls import call_records

SEARCH_TOOL = "search"
_TITLE = re.compile(r"^\d+\. ([^\n]+?): ", re.MULTILINE)


def shown_titles(trajectory: Any) -> set[str]:
    """The titles of the documents that the trajectory's successful searches showed."""
    titles: set[str] = set()
    for record in call_records(trajectory):
        if record.get("name") == SEARCH_TOOL and record.get("status") == "ok":
            titles.update(_TITLE.findall(str(record.get("observation") or "")))
    return titles


@reward
def search_recall(trajectory, *, hops: list) -> dict:
    """The fraction of the question's hop documents that some search showed; extras: found, hops."""
    wanted = [hop.get("query") for hop in hops if isinstance(hop, Mapping)]
    wanted = [title for title in wanted if isinstance(title, str) and title]
    if not wanted:
        return {"reward": 0.0, "found": 0, "hops": 0}
    shown = {title.casefold() for title in shown_titles(trajectory)}
    found = sum(title.casefold() in shown for title in wanted)
    return {"reward": found / len(wanted), "found": found, "hops": len(wanted)}
