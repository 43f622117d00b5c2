"""Env classes for the pool tests that must be importable by a child process (module level).

The subprocess provider pickles an env's factory by reference, so the child imports this module
(``tests`` is a package and the child gets the parent's ``sys.path``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

from agentfly_cli.envs.base import BaseEnv
from agentfly_cli.errors import UserError


class ProcEnv(BaseEnv):
    """A counter env with ways to fail. Actions of ``step``:

    ``"inc"`` adds one and returns the count; ``"pid"`` returns the process id; ``"crash"`` exits
    the process with code 3; ``"hang"`` never returns; ``"lookup"`` raises LookupError;
    ``"custom"`` raises an exception type that is not a built-in.
    """

    def __init__(
        self, start_delay: float = 0.0, hang_start: bool = False, missing_binary: str = ""
    ) -> None:
        self.start_delay = start_delay
        self.hang_start = hang_start
        self.missing_binary = missing_binary
        self.count = 0
        self.sick = False

    async def start(self) -> None:
        if self.missing_binary:  # a configuration problem: the user's to fix
            raise UserError(f"{self.missing_binary} not found: install it")
        if self.hang_start:
            await asyncio.sleep(3600)
        if self.start_delay:
            await asyncio.sleep(self.start_delay)

    async def reset(self, task: Mapping[str, Any] | None = None) -> Any:
        self.count = 0
        if task and task.get("crash_on_reset"):
            os._exit(4)
        return os.getpid()

    async def step(self, action: Any) -> Any:
        if action == "inc":
            self.count += 1
            return self.count
        if action == "pid":
            return os.getpid()
        if action == "crash":
            os._exit(3)
        if action == "hang":
            await asyncio.sleep(3600)
        if action == "lookup":
            raise LookupError("no note named 'zz'")
        if action == "custom":
            raise CustomEnvError("something env-specific")
        if action == "sicken":
            self.sick = True
            return "sick"
        raise ValueError(f"unknown action {action!r}")

    async def healthy(self) -> bool:
        return not self.sick


class CustomEnvError(Exception):
    """An exception type that exists only in this module."""


def make_proc_env(**options: Any) -> ProcEnv:
    """A module-level factory function (picklable by reference)."""
    return ProcEnv(**options)


class GuessEnv(BaseEnv):
    """An env that speaks first: ``reset`` returns the task's ``opening`` (a str or a dict;
    None when the row has none), and ``step(word)`` scores a guess at the task's ``target``:
    ``{"observation", "reward", "done"}``, done on the right word. JSON in and out, so it also
    serves through a pool server."""

    def __init__(self) -> None:
        self.task: dict[str, Any] = {}
        self.guesses: list[str] = []

    async def reset(self, task: Mapping[str, Any] | None = None) -> Any:
        self.task, self.guesses = dict(task or {}), []
        return self.task.get("opening")

    async def step(self, action: Any) -> Any:
        self.guesses.append(str(action))
        right = action == self.task.get("target")
        text = "right" if right else f"wrong ({len(self.guesses)} guesses)"
        return {"observation": text, "reward": 1.0 if right else 0.0, "done": right}


def make_guess_env() -> GuessEnv:
    """A module-level factory (picklable by reference, for the process provider)."""
    return GuessEnv()
