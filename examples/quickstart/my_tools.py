"""Tools of your own: the README's `@tool` example, over a three-line corpus.

    agentfly tools call examples/quickstart/my_tools.py:search --args '{"query": "ada"}'
    agentfly rollout examples/quickstart/my_recipe.yaml \
        --tools examples/quickstart/my_tools.py:search,answer
"""

from __future__ import annotations

from agentfly_cli import tool

CORPUS = [
    "Ada Lovelace wrote the first published program, for Babbage's Analytical Engine.",
    "Charles Babbage designed the Analytical Engine in 1837.",
    "Grace Hopper wrote the first compiler, A-0, in 1952.",
]


@tool
def search(query: str, limit: int = 5) -> list[str]:
    """Search the corpus.

    Args:
        query: What to look for.
        limit: At most this many hits.
    """
    words = query.lower().split()
    hits = [line for line in CORPUS if any(word in line.lower() for word in words)]
    return hits[:limit]
