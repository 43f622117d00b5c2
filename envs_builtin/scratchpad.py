"""``scratchpad``: a per-trajectory notebook, the smallest stateful environment.

Each trajectory gets its own notes; ``reset`` clears them. The ``notes_*`` tools declare
``env="scratchpad"`` and receive the trajectory's env, so state carries across turns while
trajectories stay isolated. Sizes are capped so that a looping model cannot exhaust memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfly_cli.components.tools import tool
from agentfly_cli.envs.base import BaseEnv, EnvSpec

MAX_NOTES = 64
MAX_NOTE_CHARS = 4000


class ScratchpadEnv(BaseEnv):
    """Named text notes. Actions: ``{"op": "write"|"read"|"list", "key": ..., "text": ...}``."""

    def __init__(self, max_notes: int = MAX_NOTES, max_note_chars: int = MAX_NOTE_CHARS):
        self.max_notes = max_notes
        self.max_note_chars = max_note_chars
        self.notes: dict[str, str] = {}
        self.closed = False

    async def reset(self, task: Mapping[str, Any] | None = None) -> None:
        self.notes.clear()

    async def step(self, action: Mapping[str, Any]) -> str:
        if self.closed:
            raise RuntimeError("the scratchpad is closed")
        op = action.get("op")
        if op == "write":
            return self._write(str(action["key"]), str(action["text"]))
        if op == "read":
            key = str(action["key"])
            if key not in self.notes:
                known = ", ".join(sorted(self.notes)) or "none yet"
                raise LookupError(f"no note named '{key}'; notes: {known}")
            return self.notes[key]
        if op == "list":
            return "\n".join(sorted(self.notes)) or "(no notes)"
        raise ValueError(f"unknown op {op!r}; use write, read or list")

    def _write(self, key: str, text: str) -> str:
        if len(text) > self.max_note_chars:
            raise ValueError(f"note is {len(text)} characters; the limit is {self.max_note_chars}")
        if key not in self.notes and len(self.notes) >= self.max_notes:
            raise ValueError(f"the scratchpad holds at most {self.max_notes} notes")
        self.notes[key] = text
        return f"saved note '{key}' ({len(text)} characters)"

    async def close(self) -> None:
        self.closed = True
        self.notes.clear()

    async def healthy(self) -> bool:
        return not self.closed


SCRATCHPAD = EnvSpec(
    name="scratchpad",
    factory=ScratchpadEnv,
    description="Per-trajectory named notes (notes_write / notes_read / notes_list)",
    pool_max=1024,
    warm_size=0,
    start_timeout=5.0,
    resources={"cpu": 0.0, "memory_mb": 1.0},
)


@tool(env="scratchpad")
async def notes_write(env: ScratchpadEnv, key: str, text: str) -> str:
    """Save a note under a name, replacing any note of that name.

    Args:
        key: The note's name.
        text: What to remember.
    """
    return await env.step({"op": "write", "key": key, "text": text})


@tool(env="scratchpad")
async def notes_read(env: ScratchpadEnv, key: str) -> str:
    """Read the note saved under a name.

    Args:
        key: The note's name.
    """
    return await env.step({"op": "read", "key": key})


@tool(env="scratchpad")
async def notes_list(env: ScratchpadEnv) -> str:
    """List the names of the saved notes."""
    return await env.step({"op": "list"})
