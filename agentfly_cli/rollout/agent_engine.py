"""Rollouts by an agent program: each chain is one run of ``fn(task, base_url)`` against the
gateway, and its session's segments are the chain's trajectories.

:class:`AgentEngine` and :class:`~agentfly_cli.rollout.engine.RolloutEngine` are both an
:class:`~agentfly_cli.rollout.engine_protocol.Engine` (``run``, ``backend``, ``envs``,
``settings``, ``chat``, ``meta``, ``sampled_tokens``), so ``agentfly rollout``, ``eval`` and
``train`` run agents as they run recipes. Each ``run`` serves the
gateway on a free local port, in the same event loop as the backend, for as long as it lasts.
An agent that raises (even ``SystemExit``), outlives ``agent.timeout_s`` (even blocked in sync
code), or returns no reward or answer (NaN, ``10**400``, a ``str()`` that raises) is data: its
segments keep the error and score 0 (:mod:`~agentfly_cli.rollout.agent_calls` runs each call);
an episode that made no request is one empty trajectory (nothing to train on, but an eval
counts it).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.rollout.agent_calls import AgentCaller, AgentFailed, Plain
from agentfly_cli.serve.auth import Access
from agentfly_cli.serve.gateway import Gateway
from agentfly_cli.serve.limits import UNBOUNDED_SESSIONS, ServeLimits
from agentfly_cli.trajectory import Trajectory

log = logging.getLogger(__name__)


def load_agent(entry: str) -> Callable[..., Any]:
    """The agent function named by ``entry`` (``file.py:fn`` or ``module:fn``), checked."""
    from agentfly_cli.plugin_host.loading import load_object

    fn = load_object(entry)
    if not callable(fn):
        raise UserError(
            f"agent {entry!r} is not a function; give file.py:fn with fn(task, base_url)"
        )
    try:
        inspect.signature(fn).bind({}, "http://x/v1")
    except TypeError:
        raise UserError(
            f"agent {entry!r} must take (task, base_url): the task row and the OpenAI base URL "
            "of its session"
        ) from None
    except ValueError:  # a builtin without a signature: let the call decide
        pass
    return fn


class AgentEngine:
    """Runs ``rollout.n`` episodes of the agent per task, concurrently, through the gateway."""

    def __init__(
        self,
        backend: Any,
        chat: Any,
        parser: Any,
        agent: Callable[..., Any],
        reward: Any,
        settings: Any,
        agent_settings: Any,
        *,
        env_manager: Any,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        self.backend, self.chat, self.parser = backend, chat, parser
        self.agent, self.reward = agent, reward
        self.settings, self.agent_settings = settings, agent_settings
        self.envs = env_manager  # the agent brings its own tools: no pool is used
        self.meta = dict(meta or {})
        sampling = settings if agent_settings.sampling == "rollout" else None
        self.gateway = Gateway(
            backend, chat, parser, "agentfly", max_tokens=settings.max_tokens_per_turn,
            sampling=sampling, max_prompt_tokens=settings.max_total_tokens,
            limits=ServeLimits(**UNBOUNDED_SESSIONS), open_on_request=False,
        )  # fmt: skip
        # Agents never see this key: only the engine may list or end sessions (in process).
        self._access = Access(admin_key=secrets.token_urlsafe(32))
        self.calls = AgentCaller(
            agent, agent_settings.timeout_s, agent_settings.grace_s, agent_settings.max_abandoned
        )
        self._slots: tuple[Any, asyncio.Semaphore] | None = None

    @property
    def sampled_tokens(self) -> int:
        return self.gateway.sampled_tokens

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
        """``n`` (default ``rollout.n``) episodes per task; their segments, by task, then by
        episode. ``on_finish`` gets each segment as its episode ends. ``greedy``: one more
        episode per task, sample ``n``, whose every request the gateway samples at
        temperature 0 whatever the program asks (ReMax's baseline; ``meta["greedy"]``)."""
        from agentfly_cli.serve.app import build_app
        from agentfly_cli.serve.server import serving_in_loop

        n = self.settings.n if n is None else n
        async with serving_in_loop(build_app(self.gateway, access=self._access)) as url:
            episodes = [
                self._episode(url, tasks[i], i + task_offset, s, batch_id, on_finish, s == n)
                for i in range(len(tasks))
                for s in range(n + greedy)
            ]
            results = await asyncio.gather(*episodes)
        return [t for segments in results for t in segments]

    async def _episode(
        self,
        url: str,
        task: Mapping[str, Any],
        index: int,
        sample: int,
        batch_id: str,
        on_finish,
        greedy: bool = False,
    ) -> list[Trajectory]:
        session = f"{batch_id}-{index}-{sample}-{secrets.token_urlsafe(16)}"  # unguessable
        task_id = task.get("id") if isinstance(task, Mapping) else None
        self.gateway.open_episode(  # the only sessions this gateway serves
            session,
            task_index=index,
            task_id=None if task_id is None else str(task_id),
            greedy=greedy,
        )
        result: Plain = None
        error: str | None = None
        async with self._slots_for_loop():
            try:
                result = await self.calls.call(dict(task), f"{url}/s/{session}/v1")
            except AgentFailed as failed:  # the agent's failure is data
                error = str(failed)
        episode = self.gateway.close_episode(session)
        segments = episode.trajectories() if episode is not None else []
        if not segments:  # no token to train on, but the episode counts (an eval's 0)
            log.warning(
                "agent episode %s made no request%s", session, f" ({error})" if error else ""
            )
            segments = [Trajectory(meta={"episode": session})]
        reward, prediction, extras = await self._reward(result, error, segments[-1], task)
        for k, trajectory in enumerate(segments):
            trajectory.group_id = f"{batch_id}:{index}"
            trajectory.task_index, trajectory.sample_index = index, sample
            trajectory.task = dict(task)
            trajectory.meta.update(self.meta, segment=k, segments=len(segments))
            if greedy:
                trajectory.meta["greedy"] = True
            trajectory.finish_reason = "abort" if error else "answer"
            trajectory.error = error
            trajectory.reward, trajectory.prediction = reward, prediction
            trajectory.reward_extras = dict(extras)
            if on_finish is not None:
                on_finish(trajectory)
        return segments

    async def _reward(self, result: Plain, error: str | None, last: Trajectory, task: Mapping):
        """The episode's reward: 0 when the agent failed, the (finite) number it returned, or
        the run's reward of the answer it returned."""
        if error is not None:
            return 0.0, None, {"error": error}
        if isinstance(result, float):
            return result, None, {}
        prediction = result
        if self.reward is None:
            raise UserError(
                "the agent returned an answer but the run has no reward to score it: add "
                "--reward, or return a number from the agent"
            )
        last.prediction = prediction
        scored = await self.reward.score(prediction, last, dict(task))
        extras = dict(scored.extras)
        if scored.failed:
            extras["error"] = scored.error
        return float(scored.reward), prediction, extras

    def _slots_for_loop(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self.agent_settings.concurrency))
        return self._slots[1]
