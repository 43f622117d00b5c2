"""The verifiers bridge's agent (the ``--agent`` contract, docs/serve.md): one task rolled out
by the environment's own rollout in its venv against the episode's gateway, scored by its
rubric; the reward is the episode's."""

from __future__ import annotations

from typing import Any


def agent(task: dict[str, Any], base_url: str) -> float:
    """The rubric's reward of ``task`` rolled out through ``base_url``; a failing env raises,
    which fails only this episode."""
    from bridges_builtin.verifiers_venv import episode

    return float(episode(task, base_url)["reward"])
