"""What the bridges' rewards read from a chain: the model's last reply, whole (the parsed
prediction may be cut to a line or stripped of the indentation code needs)."""

from __future__ import annotations

from typing import Any


def last_reply(trajectory: Any) -> str | None:
    """The text of the trajectory's last assistant message (None without one)."""
    for message in reversed(getattr(trajectory, "messages", None) or []):
        if message.get("role") == "assistant" and isinstance(message.get("content"), str):
            return message["content"]
    return None
