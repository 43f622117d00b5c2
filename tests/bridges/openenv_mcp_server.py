"""A small OpenEnv MCP tool server for the openenv bridge's MCP tests, written with
openenv-core's own MCPEnvironment (FastMCP tools) and run by ``.venv-openenv``'s Python:
``python openenv_mcp_server.py PORT SESSIONS [notools | bare]``.

Guess the number with tools: the secret is ``seed % 8 + 1``; ``guess(number)`` says right,
higher or lower (a number outside 1..8 is the tool's error), ``hint()`` says whether it is
even. The server sets reward and done in ``step_async``, after the call: the right guess is
reward 1.0 and done, the fourth wrong one reward 0.0 and done. ``notools`` serves no tools;
``bare`` serves the same env under the bare ``Action`` (its /schema does not say MCP).
"""

from __future__ import annotations

import sys
import uuid

import uvicorn
from fastmcp import FastMCP
from openenv.core.env_server import create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation
from openenv.core.env_server.types import Action, Observation, State

TRIES = 4
NO_TOOLS = False


class Said(Observation):
    message: str


class GuessTools(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        self.secret, self.tries, self.won = 1, 0, False
        self._state = State(episode_id=str(uuid.uuid4()), step_count=0)
        mcp = FastMCP("guess-tools")
        if not NO_TOOLS:

            @mcp.tool
            def guess(number: int) -> str:
                """Guess the secret number (from 1 to 8)."""
                if not 1 <= number <= 8:
                    raise ValueError(f"{number} is not from 1 to 8")
                self.tries += 1
                if number == self.secret:
                    self.won = True
                    return "Right!"
                return "No, higher." if number < self.secret else "No, lower."

            @mcp.tool
            def hint() -> str:
                """Say whether the secret number is even or odd."""
                return "It is even." if self.secret % 2 == 0 else "It is odd."

        super().__init__(mcp)

    def reset(self, seed=None, episode_id=None, **kwargs) -> Said:
        self.secret, self.tries, self.won = (seed or 0) % 8 + 1, 0, False
        self._state = State(episode_id=episode_id or str(uuid.uuid4()), step_count=0)
        return Said(message=f"Guess my number from 1 to 8 with the guess tool; you have {TRIES} "
                    "guesses.")  # fmt: skip

    async def step_async(self, action, timeout_s=None, **kwargs):
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        self._state.step_count += 1
        if isinstance(action, CallToolAction) and action.tool_name == "guess":
            if observation.error is None:  # a counted guess: the reward channel hears it
                observation.reward = 1.0 if self.won else 0.0
                observation.done = self.won or self.tries >= TRIES
        return observation

    def _step_impl(self, action, timeout_s=None, **kwargs) -> Said:
        return Said(message="call a tool: guess(number) or hint()")

    @property
    def state(self) -> State:
        return self._state


if __name__ == "__main__":
    port, sessions = int(sys.argv[1]), int(sys.argv[2])
    NO_TOOLS = sys.argv[3:] == ["notools"]
    kinds = (CallToolAction, CallToolObservation)
    if sys.argv[3:] == ["bare"]:
        kinds = (Action, Observation)
    app = create_app(GuessTools, *kinds, env_name="guess_tools", max_concurrent_envs=sessions)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
