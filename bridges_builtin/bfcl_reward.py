"""``bfcl_ast``: BFCL's own AST checker on the calls of the model's last calling turn."""

from __future__ import annotations

from typing import Any

from agentfly_cli.components.rewards import reward
from bridges_builtin.bfcl_checks import score_calls


@reward
def bfcl_ast(trajectory: Any, bfcl: dict) -> dict:
    """1.0 when BFCL's AST checker accepts the calls the model made (for the irrelevance
    categories: when it called nothing), else 0.0 with BFCL's error type and reason."""
    return score_calls(trajectory, bfcl)


@reward
def bfcl_multi_turn(trajectory: Any, bfcl: dict) -> dict:
    """1.0 when BFCL's multi-turn checks (state and responses after every user turn, against
    the ground truth run on fresh instances) pass, else 0.0 with BFCL's error type."""
    from bridges_builtin.bfcl_multi_checks import score_episode

    return score_episode(trajectory, bfcl)
