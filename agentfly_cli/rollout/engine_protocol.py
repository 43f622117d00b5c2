"""What a rollout engine is to its callers: the one protocol that
:class:`~agentfly_cli.rollout.engine.RolloutEngine` (a recipe's turn loop) and
:class:`~agentfly_cli.rollout.agent_engine.AgentEngine` (an agent program through the gateway)
both implement, so that ``agentfly rollout``, ``eval`` and ``train`` run either one alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from agentfly_cli.chat.templates import ChatTemplate
    from agentfly_cli.envs.manager import ResourceManager
    from agentfly_cli.settings.rollout import RolloutSettings
    from agentfly_cli.trajectory import Trajectory


@runtime_checkable
class Engine(Protocol):
    """Runs ``n`` chains per task over one backend and records each as trajectories.

    Callers enter ``backend`` and ``envs`` (both async context managers) around ``run``, read
    ``settings.n`` and ``chat``, and watch ``sampled_tokens`` for progress.
    """

    backend: Any  # the LLM backend (token ids in, sampled ids and logprobs out)
    chat: ChatTemplate
    settings: RolloutSettings  # the run's ``rollout`` section
    envs: ResourceManager  # the run's env pools
    meta: dict[str, Any]  # copied into every trajectory

    @property
    def sampled_tokens(self) -> int:
        """Tokens sampled so far by every chain of this engine."""
        ...

    async def run(
        self,
        tasks: Sequence[Mapping[str, Any]],
        *,
        batch_id: str = "b0",
        on_finish: Callable[[Trajectory], Any] | None = None,
        task_offset: int = 0,
        n: int | None = None,
        greedy: bool = False,
    ) -> list[Trajectory]:
        """``n`` (default ``settings.n``) chains per task, ordered by task, then by sample;
        ``on_finish`` gets each trajectory as soon as it is scored. ``greedy``: one more chain
        per task at temperature 0, marked ``meta["greedy"]`` (ReMax's baseline)."""
        ...
