"""Environments that speak first: the opening a chain's env gives at reset.

With ``rollout.opening_env: NAME``, a chain leases that env before its first prompt (the same
lease its tools then use) and reads what ``reset(task)`` returned: a string is the first user
message; a dict ``{"observation": str, "system_prompt": str?, "info": dict?, "reward": float?,
"done": bool?}`` gives the first user message, the system message when neither the recipe nor
the row has one, and a report on the reward channel at turn -1. The first prompt is then the
chat template's rendering of that conversation, as for any task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfly_cli.rollout.reward_channel import report, reward_value
from agentfly_cli.rollout.tasks import opening_messages
from agentfly_cli.trajectory import Trajectory

OPENING_KEYS = ("observation", "system_prompt", "info", "reward", "done")
_FORMS = (
    "return the opening observation from reset(task): a string, or a dict with 'observation' "
    "(and optional 'system_prompt', 'info', 'reward', 'done')"
)


class OpeningError(ValueError):
    """An opening env's reset returned nothing, or something that is not an opening."""


@dataclass
class Opening:
    """What an env said at reset."""

    observation: str
    system_prompt: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    reward: float | None = None
    done: bool = False
    reports: bool = False  # a dict form: it reports on the reward channel at turn -1


def read_opening(value: Any, env: str) -> Opening:
    """The opening of env ``env`` from its reset's return ``value``; :class:`OpeningError`
    naming the env otherwise."""
    where = f"env '{env}' (rollout.opening_env)"
    if isinstance(value, str):
        return Opening(value)
    if value is None:
        raise OpeningError(f"{where} returned nothing from reset(task); {_FORMS}")
    if not isinstance(value, Mapping):
        raise OpeningError(f"{where} returned a {type(value).__name__} from reset; {_FORMS}")
    unknown = sorted(map(str, set(value) - set(OPENING_KEYS)))
    if unknown:
        raise OpeningError(
            f"{where}: reset returned the unknown key(s) {', '.join(unknown)}; an opening has "
            f"{', '.join(OPENING_KEYS)} (put anything else in 'info')"
        )
    observation = value.get("observation")
    if not isinstance(observation, str):
        raise OpeningError(f"{where}: reset's 'observation' must be a string; {_FORMS}")
    system_prompt, info = value.get("system_prompt"), value.get("info")
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise OpeningError(f"{where}: reset's 'system_prompt' must be a string")
    if info is not None and not isinstance(info, Mapping):
        raise OpeningError(f"{where}: reset's 'info' must be a dict")
    reward, done = value.get("reward"), value.get("done", False)
    if reward is not None and reward_value(reward) is None:
        raise OpeningError(f"{where}: reset's 'reward' must be a finite number, not {reward!r}")
    if not isinstance(done, bool):
        raise OpeningError(f"{where}: reset's 'done' must be true or false, not {done!r}")
    return Opening(observation, system_prompt, dict(info or {}), reward_value(reward), done, True)


def check_opening_env(name: str | None, envs: Mapping[str, Any]) -> str | None:
    """``name`` (``rollout.opening_env``) when it is one of ``envs``; ValueError otherwise."""
    if name is not None and name not in envs:
        known = ", ".join(sorted(envs)) or "none"
        raise ValueError(f"rollout.opening_env '{name}' is not an env given ({known})")
    return name


def speak_first(
    value: Any,
    env: str,
    trajectory: Trajectory,
    system_prompt: str | None = None,
    examples: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The messages a chain starts from, given what its opening env ``env`` returned from
    ``reset`` (``value``); a dict's report goes on the trajectory's reward channel."""
    opening = read_opening(value, env)
    reported = opening_report(opening, env)
    if reported is not None:
        trajectory.env_reports.append(reported)
    return opening_conversation(trajectory.task, opening, system_prompt, examples)


def opening_report(opening: Opening, env: str) -> dict[str, Any] | None:
    """The opening's report on the reward channel (turn -1), or None for a plain string."""
    if not opening.reports:
        return None
    return report(-1, f"env:{env}", {**opening.info, "reward": opening.reward,
                                      "done": opening.done})  # fmt: skip


def opening_conversation(
    task: Mapping[str, Any],
    opening: Opening,
    system_prompt: str | None = None,
    examples: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The messages a chain starts from: the system message (the row's own, else the recipe's
    ``system_prompt``, else the env's), the recipe's worked examples, then the env's
    observation as the user message (in place of the row's question or messages)."""
    first: list[dict[str, Any]] = []
    own = task.get("messages")
    if own and isinstance(own[0], Mapping) and own[0].get("role") == "system":
        first.append(dict(own[0]))
    elif not system_prompt and opening.system_prompt:
        first.append({"role": "system", "content": opening.system_prompt})
    first.append({"role": "user", "content": opening.observation})
    return opening_messages({**task, "messages": first}, system_prompt, examples)
