"""``textworld_score``: the TextWorld game score a trajectory reached, replayed on the game.

TextWorld games are deterministic, so the reward loads the task's game afresh and replays the
commands of the trajectory's successful ``tw_act`` / ``tw_look`` / ``tw_inventory`` calls, in
order. It does not trust any text in the trajectory, needs no env to outlive its chain, and
scores saved trajectories the same way. Replaying costs a game load (about 20 ms) and 2-3 ms
per command.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agentfly_cli.components.rewards import reward
from envs_builtin.textworld_env import STEPPING_TOOLS, TextWorldEnv


def replay_commands(trajectory: Any) -> list[str]:
    """The game commands of a trajectory's successful stepping tool calls, in order."""
    calls = getattr(trajectory, "tool_calls", None)
    if calls is None and isinstance(trajectory, Mapping):
        calls = trajectory.get("tool_calls")
    commands = []
    for call in calls or []:
        record = call if isinstance(call, Mapping) else vars(call)
        name = record.get("name")
        if record.get("status") != "ok" or name not in STEPPING_TOOLS:
            continue
        command = STEPPING_TOOLS[name] or _command_argument(record.get("arguments"))
        if command:
            commands.append(command)
    return commands


def _command_argument(arguments: Any) -> str | None:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return arguments.strip() or None  # plain text, as a ReAct parser passes it
    if isinstance(arguments, Mapping):
        command = arguments.get("command")
        return command if isinstance(command, str) else None
    return None


async def replay(game: str, commands: list[str]) -> dict[str, Any]:
    """Play ``commands`` on a fresh copy of ``game``; the final state (score, won, ...)."""
    env = TextWorldEnv()
    await env.start()
    try:
        state = await env.reset({"game": game})
        played = 0
        for command in commands:
            if state["done"]:
                break
            try:
                state = await env.step({"command": command})
            except ValueError:
                continue  # the tool rejected it too, so it never reached the game
            played += 1
        return {**state, "played": played}
    finally:
        await env.close()


@reward(timeout=60.0)
async def textworld_score(trajectory, *, game: str) -> dict:
    """The game's score over its maximum (1.0 when won), replayed from the tool calls."""
    state = await replay(game, replay_commands(trajectory))
    if state["won"]:
        value = 1.0
    elif state["max_score"] > 0:
        value = min(max(state["score"] / state["max_score"], 0.0), 1.0)
    else:
        value = 0.0
    return {
        "reward": value,
        "score": state["score"],
        "max_score": state["max_score"],
        "won": state["won"],
        "moves": state["moves"],
    }
