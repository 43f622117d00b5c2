"""The verifiers bridge's agent (the ``--agent`` contract, docs/serve.md): one task rolled out
by the environment's own rollout in its venv against the episode's gateway, scored by its
rubric. The contract takes a number or an answer; a number has no room for the rubric's named
metrics, so the agent answers with the rubric's result as JSON, which the recipe's reward
``verifiers_rubric`` turns into the reward and its extras."""

from __future__ import annotations

import json
from typing import Any


def agent(task: dict[str, Any], base_url: str) -> str:
    """The rubric's result (``{"reward", "metrics"}``, JSON) of ``task`` rolled out through
    ``base_url``; a failing env raises, which fails only this episode."""
    from bridges_builtin.verifiers_venv import episode

    result = episode(task, base_url)
    return json.dumps({"reward": float(result["reward"]), "metrics": result.get("metrics") or {}})
