"""The ``bfcl_api`` env: one episode's BFCL API instances, stepped by the row's tools.

``reset(task)`` makes new instances of the task's classes and loads its ``initial_config``
(:class:`~bridges_builtin.bfcl_api.ApiSession`); each call of a row tool
(``rollout.task_tools.on_call: env``) runs on them by name with keyword arguments, and a failing
call is BFCL's ``Error during execution: ...`` as the observation. ``reset(None)`` at release
drops the instances, so a pooled env carries nothing into its next episode.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentfly_cli.envs.base import BaseEnv, EnvSpec
from agentfly_cli.errors import UserError
from bridges_builtin.bfcl_api import ApiSession, backend_config


class BfclApiEnv(BaseEnv):
    """BFCL's stateful API backends for one multi-turn episode at a time."""

    def __init__(self) -> None:
        backend_config()  # one line naming the install command when bfcl-eval is absent
        self.session: ApiSession | None = None

    async def reset(self, task: Mapping[str, Any] | None = None) -> None:
        self.session = None
        if not task:
            return None
        bfcl = task.get("bfcl")
        if not isinstance(bfcl, Mapping) or "involved_classes" not in bfcl:
            raise UserError("the bfcl_api env needs a bfcl multi-turn row (its 'bfcl' field "
                            "names involved_classes); use a bfcl:multi_turn_* recipe")  # fmt: skip
        self.session = ApiSession.for_entry(bfcl)
        return None

    async def step(self, action: Any) -> dict[str, Any]:
        """One call ``{"tool": name, "arguments": {...}}``; synchronous inside, so the calls of
        one turn run in the order the model wrote them."""
        if self.session is None:
            raise RuntimeError("no episode is running: the env was not reset with a task")
        name = str(action.get("tool", ""))
        arguments = action.get("arguments") or {}
        return {"observation": self.session.call(name, arguments)}

    async def close(self) -> None:
        self.session = None


BFCL_API = EnvSpec(
    name="bfcl_api",
    factory=BfclApiEnv,
    description="one BFCL multi-turn episode's API instances (GorillaFileSystem, TwitterAPI, "
    "...), fresh per episode; the row's tools are called on them",
    pool_max=256,
    resources={"cpu": 0.01, "memory_mb": 5},
)
