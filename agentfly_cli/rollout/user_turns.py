"""User turns mid-episode: user messages a task holds back until the model has the floor.

A row's ``user_turns`` field (the one ``data.user_turns_field`` names) lists them in order:
``{"content": str, "after": "answer" | N}``. ``"answer"``: after the model's next answer (a
turn without a tool call), as in BFCL's multi-turn tasks. ``N``: after assistant turn N
(0-based), or at an earlier answer, since a model that answers hands the floor back. They are
delivered in order; the chain ends at an answer only when none is left (and within
``rollout.max_turns`` and ``rollout.max_total_tokens`` as always). The engine appends each as
the chat template's exact delta, with loss mask 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfly_cli.errors import UserError

ANSWER = "answer"
TURN_KEYS = ("content", "after")


def check_user_turns(row: Mapping[str, Any], field: str, where: str) -> None:
    """Raise a UserError naming ``where`` (the row) unless ``row[field]``, when present, is a
    list of ``{"content": str, "after": "answer" | int >= 0}``."""
    if field not in row:
        return
    turns = row[field]
    fix = f'a list of {{"content": "...", "after": "{ANSWER}" or a turn number from 0}}'
    if not isinstance(turns, list):
        raise UserError(f"{where}: '{field}' must be {fix}, not a {type(turns).__name__}")
    for i, turn in enumerate(turns):
        at = f"{where}: {field}[{i}]"
        if not isinstance(turn, Mapping):
            raise UserError(f"{at} must be an object: {fix}")
        unknown = sorted(map(str, set(turn) - set(TURN_KEYS)))
        if unknown:
            raise UserError(f"{at} has the unknown key(s) {', '.join(unknown)}; it takes {fix}")
        if not isinstance(turn.get("content"), str):
            raise UserError(f"{at}.content must be a string (the user message)")
        after = turn.get("after", ANSWER)
        if after != ANSWER and (type(after) is not int or after < 0):
            raise UserError(
                f'{at}.after must be "{ANSWER}" or an assistant turn number from 0, not {after!r}'
            )


class UserTurns:
    """The user turns of one chain that are still to come."""

    def __init__(self, task: Mapping[str, Any] | None = None, field: str = "user_turns") -> None:
        turns = task.get(field) if isinstance(task, Mapping) else None
        self._pending = [dict(t) for t in turns] if isinstance(turns, list) else []
        self.total = len(self._pending)
        self.delivered: list[int] = []  # per delivered turn: the assistant turn it followed

    def __bool__(self) -> bool:
        """True while a user turn is still to come."""
        return bool(self._pending)

    def note(self, trajectory: Any) -> None:
        """Record on a finished chain's ``meta`` which user turns were delivered, and when."""
        if self.total:
            trajectory.meta["user_turns"] = {"total": self.total,
                                             "delivered_after": list(self.delivered)}  # fmt: skip

    def due(self, turn: int, answered: bool) -> list[dict[str, Any]]:
        """The user messages that follow assistant turn ``turn`` (``answered``: it was an
        answer), taken off the list: the next ones due in order. An answer always gives the
        floor to the next user turn; ``after: N`` turns are also due once turn N has ended."""
        messages: list[dict[str, Any]] = []
        while self._pending:
            after = self._pending[0].get("after", ANSWER)
            if answered and not messages:
                pass  # an answer hands the floor to the next user turn, whatever it waits for
            elif after == ANSWER or turn < after:
                break
            messages.append({"role": "user", "content": self._pending.pop(0)["content"]})
            self.delivered.append(turn)
        return messages
