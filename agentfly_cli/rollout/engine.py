"""The rollout engine: chains of agent turns, run concurrently, recorded token-exactly.

Each chain is a small state machine: GENERATING (the backend samples a turn) -> RUNNING_TOOLS
(the parsed calls run concurrently) -> back to GENERATING, until DONE. Sampled ids are kept as
sampled (loss mask 1); observation ids are the chat template's delta for that turn (mask 0).
Rewards are scored as each chain finishes, while the other chains keep generating.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import gc
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from agentfly_cli.backends.base import Backend, RequestContext, SamplingParams
from agentfly_cli.chat.parsers import ToolCall, ToolCallParser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.components.tools import Tool, ToolErrorKind, ToolResult
from agentfly_cli.envs.manager import ResourceManager
from agentfly_cli.envs.pool import EnvConfigError
from agentfly_cli.files.surrogates import replace_surrogates
from agentfly_cli.rollout.opening import check_opening_env, speak_first
from agentfly_cli.rollout.prompt_warmup import warm_first_prompts
from agentfly_cli.rollout.reward_channel import call_info, tool_reports
from agentfly_cli.rollout.task_tools import TaskTools, ToolSet
from agentfly_cli.rollout.tasks import check_system_prompt, opening_messages
from agentfly_cli.rollout.turn_end import finish_after_turn
from agentfly_cli.rollout.turn_plan import TurnPlan, parse_turn, plan_turn
from agentfly_cli.rollout.user_turns import UserTurns
from agentfly_cli.settings.rollout import RolloutSettings
from agentfly_cli.trajectory import ToolCallRecord, Trajectory

log = logging.getLogger(__name__)


class ChainState(enum.Enum):
    """Where a chain is in its turn loop."""

    GENERATING = "generating"
    RUNNING_TOOLS = "running_tools"
    DONE = "done"


@dataclass
class _Chain:
    """The mutable state of one chain while it runs."""

    trajectory: Trajectory
    messages: list[dict[str, Any]]
    state: ChainState = ChainState.GENERATING
    errors: int = 0
    turn_closed: bool = True  # the last assistant turn ended on its end-of-turn token
    envs: dict[str, Any] = field(default_factory=dict)  # its env leases (handles), by name
    env_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    user_turns: UserTurns = field(default_factory=UserTurns)  # the row's, still to come
    stack: AsyncExitStack = field(default_factory=AsyncExitStack)
    tools: ToolSet | None = None  # the run's tools and the task's own (rollout/task_tools.py)

    async def lease(self, envs: ResourceManager, name: str) -> Any:
        """The chain's lease (handle) of the env ``name`` from ``envs``, taken once even when
        calls ask for it together. The lease ends with the chain: the env goes back to its
        pool, or is killed when the chain crashed or was cancelled."""
        handle = self.envs.get(name)
        if handle is None:
            async with self.env_lock:
                handle = self.envs.get(name)
                if handle is None:
                    lease = envs.lease(name, self.trajectory.task)
                    handle = self.envs[name] = await self.stack.enter_async_context(lease)
        return handle


@contextlib.contextmanager
def _fewer_gc_passes(threshold: int | None):
    """Raise the garbage collector's first threshold while chains run, then restore it.

    Thousands of live chains make each full collection walk a large object graph; the default
    threshold (700 allocations) runs collections so often that they cost more than the engine.
    """
    if not threshold:
        yield
        return
    previous = gc.get_threshold()
    gc.set_threshold(max(threshold, previous[0]), *previous[1:])
    try:
        yield
    finally:
        gc.set_threshold(*previous)


def _derive_seed(base: int | None, *parts: int) -> int | None:
    if base is None:
        return None
    digest = hashlib.blake2b(repr((base, *parts)).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & 0x7FFFFFFF


class RolloutEngine:
    """Runs groups of ``n`` chains per task against a backend, tools and a reward (an
    :class:`~agentfly_cli.rollout.engine_protocol.Engine`)."""

    def __init__(
        self,
        backend: Backend,
        chat: ChatTemplate,
        parser: ToolCallParser,
        tools: Sequence[Tool] = (),
        reward: Any = None,
        settings: RolloutSettings | None = None,
        *,
        system_prompt: str | None = None,
        examples: Sequence[Mapping[str, Any]] = (),
        env_specs: Mapping[str, Any] | None = None,
        env_manager: ResourceManager | None = None,
        meta: Mapping[str, Any] | None = None,
        user_turns_field: str = "user_turns",
        tools_field: str | None = "tools",  # the field of a row's own tools (data.tools_field)
    ) -> None:
        self.backend = backend
        self.chat = chat
        self.parser = parser
        self.tools = {t.name: t for t in tools}
        self.reward = reward
        self.settings = settings or RolloutSettings()
        self.system_prompt = system_prompt
        self.examples = [dict(m) for m in examples]
        self.env_specs = dict(env_specs or {})
        if env_manager is not None:
            self.env_specs = {**env_manager.specs, **self.env_specs}
        self.envs = env_manager or ResourceManager(self.env_specs)  # the env pools
        self.meta = dict(meta or {})  # copied into every trajectory (e.g. the tokenizer folder)
        self.task_tools = TaskTools(chat, parser, tools, self.settings.task_tools, tools_field)
        self.tool_schemas, self.parser = self.task_tools.base.schemas, self.task_tools.base.parser
        opening = check_opening_env(self.settings.opening_env, self.env_specs)
        used = {t.env for t in tools if t.env} | set(self.task_tools.envs)
        _require_envs(used, self.env_specs)
        self.user_turns_field = user_turns_field  # the row field of its mid-episode user turns
        leased = used | ({opening} if opening else set())  # every env a chain may hold
        self.chain_limit = chain_limit(self.settings.concurrency, tools, self.envs, leased)
        self._eot_ids = frozenset(chat.eot_token_ids)
        extra_stops = [i for i in chat.stop_token_ids(self.settings.stop) if i not in self._eot_ids]
        self._stop_ids = (*chat.eot_token_ids, *extra_stops)
        self._live: dict[int, _Chain] = {}  # chains running now, for live_states()
        self._slots: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None
        self.sampled_tokens = 0  # tokens sampled so far by all chains (for progress displays)
        self._warned_prompt_length = False  # said once per engine, not per chain or batch
        self._invoke_options: dict[str, Any] = {}
        if self.settings.tool_timeout is not None:
            self._invoke_options["timeout"] = self.settings.tool_timeout
        if self.settings.max_observation_chars is not None:
            self._invoke_options["max_observation_chars"] = self.settings.max_observation_chars

    # -- public --------------------------------------------------------------------------------
    def live_states(self) -> dict[str, int]:
        """How many running chains are generating and how many are running tools."""
        counts = {state.value: 0 for state in (ChainState.GENERATING, ChainState.RUNNING_TOOLS)}
        for chain in list(self._live.values()):
            if chain.state.value in counts:
                counts[chain.state.value] += 1
        return counts

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
        """Roll out ``n`` chains (default ``rollout.n``) for every task, all concurrently under
        the concurrency bound (:attr:`chain_limit`, shared by the runs of one event loop: an
        async trainer's overlapping runs never hold more envs than the pools have); ``greedy``:
        one more per task, sample ``n``, at temperature 0 (ReMax's baseline, ``meta["greedy"]``).

        Returns trajectories ordered by task, then by sample. ``on_finish`` is called with each
        trajectory as soon as it is scored.
        """
        check_system_prompt(self.system_prompt, tasks, f"batch {batch_id}")
        self.task_tools.check(tasks, f"batch {batch_id}")
        warm_first_prompts(self, tasks)
        limit = self._chain_slots()
        n = self.settings.n if n is None else n

        async def one(task_index: int, sample_index: int) -> Trajectory:
            async with limit:
                trajectory = await self.run_chain(
                    tasks[task_index],
                    task_index=task_index + task_offset,
                    sample_index=sample_index,
                    group_id=f"{batch_id}:{task_index + task_offset}",
                    greedy=greedy and sample_index == n,
                )
            if on_finish is not None:
                on_finish(trajectory)
            return trajectory

        jobs = [one(i, s) for i in range(len(tasks)) for s in range(n + greedy)]
        async with self.envs.running():
            with _fewer_gc_passes(self.settings.gc_threshold):
                trajectories = await _all_or_nothing(jobs)
        if not self._warned_prompt_length:
            self._warned_prompt_length = warn_if_prompts_too_long(
                trajectories, self.settings.max_total_tokens
            )
        return trajectories

    def _chain_slots(self) -> asyncio.Semaphore:
        """The event loop's semaphore of :attr:`chain_limit` slots (one per loop: a semaphore
        cannot cross event loops)."""
        loop = asyncio.get_running_loop()
        if self._slots is None or self._slots[0] is not loop:
            self._slots = (loop, asyncio.Semaphore(self.chain_limit))
        return self._slots[1]

    async def run_chain(
        self,
        task: Mapping[str, Any],
        *,
        task_index: int = 0,
        sample_index: int = 0,
        group_id: str = "",
        greedy: bool = False,
    ) -> Trajectory:
        """Run one chain to the end and score it (``greedy``: at temperature 0)."""
        started = time.perf_counter()
        trajectory = Trajectory(
            group_id=group_id,
            task_index=task_index,
            sample_index=sample_index,
            task=dict(task),
            meta={**self.meta, "greedy": True} if greedy else dict(self.meta),
        )
        opening_env = self.settings.opening_env
        messages = [] if opening_env else opening_messages(task, self.system_prompt, self.examples)
        chain = _Chain(
            trajectory,
            messages,
            user_turns=UserTurns(task, self.user_turns_field),
            tools=self.task_tools.for_task(task),
        )
        trajectory.timings = {"generate_s": 0.0, "tools_s": 0.0, "reward_s": 0.0}
        self._live[id(chain)] = chain
        try:
            async with chain.stack:
                if opening_env:  # the env speaks first, on the lease its tools then share
                    handle = await chain.lease(self.envs, opening_env)
                    chain.messages = speak_first(
                        handle.opening, opening_env, trajectory, self.system_prompt, self.examples
                    )
                await self._loop(chain)
        except (asyncio.CancelledError, EnvConfigError):
            raise  # a misconfigured env fails every chain alike: the rollout stops
        except Exception as exc:  # a backend failure ends this chain, not the rollout
            trajectory.finish_reason = "abort"
            trajectory.error = f"{type(exc).__name__}: {exc}"
        finally:
            chain.state = ChainState.DONE
            self._live.pop(id(chain), None)
        trajectory.messages = chain.messages
        chain.user_turns.note(trajectory)
        await score_chain(self.reward, trajectory)
        trajectory.timings["total_s"] = round(time.perf_counter() - started, 6)
        return trajectory

    # -- the turn loop -------------------------------------------------------------------------
    async def _loop(self, chain: _Chain) -> None:
        settings = self.settings
        trajectory = chain.trajectory
        prompt = self.chat.render_prompt(chain.messages, chain.tools.schemas)
        trajectory.append("prompt", prompt, sampled=False)
        if any(report["done"] for report in trajectory.env_reports):
            trajectory.finish_reason = "env_done"  # the opening env ended the episode at once
            return
        for turn in range(settings.max_turns):
            budget = settings.max_total_tokens - len(trajectory.ids)
            if budget <= 0:
                trajectory.finish_reason = "length"
                return
            chain.state = ChainState.GENERATING
            plan = await self._generate(chain, turn, budget)
            answered = trajectory.finish_reason == "answer"
            if answered and chain.user_turns:
                trajectory.finish_reason = ""  # a user turn follows the answer: it goes on
                results: list[ToolResult] = []
            elif trajectory.finish_reason:
                return
            else:
                chain.state = ChainState.RUNNING_TOOLS
                results = await self._run_tools(chain, turn, plan)
            declared = self.task_tools.finish_reason(chain.tools, results)  # a row's own tool
            if declared == "declared_call" and not any(r.terminal and r.ok for r in results):
                trajectory.finish_reason, trajectory.prediction = declared, _said(plan.parsed)
            else:
                finish_after_turn(trajectory, turn, results, chain.errors, settings)
            observation = self.chat.observation_messages(
                [(r.tool, r.info.get("call_id"), r.observation) for r in results]
            )
            chain.messages.extend(observation)
            if trajectory.finish_reason:
                return
            user = chain.user_turns.due(turn, answered)  # the row's user turns due now
            chain.messages.extend(user)
            delta = self.chat.observation_delta(
                observation + user, chain.tools.schemas, closed=chain.turn_closed
            )
            if len(trajectory.ids) + len(delta) >= settings.max_total_tokens:
                trajectory.finish_reason = "length"
                return
            trajectory.append("observation", delta, sampled=False)

    async def _generate(self, chain: _Chain, turn: int, budget: int) -> TurnPlan:
        settings = self.settings
        trajectory = chain.trajectory
        params = SamplingParams(
            max_tokens=min(settings.max_tokens_per_turn, budget),
            temperature=0.0 if trajectory.meta.get("greedy") else settings.temperature,
            top_p=settings.top_p,
            top_k=settings.top_k,
            stop_token_ids=self._stop_ids,
            seed=_derive_seed(settings.seed, trajectory.task_index, trajectory.sample_index, turn),
        )
        task_id = trajectory.task.get("id") if isinstance(trajectory.task, dict) else None
        context = RequestContext(
            trajectory.task_index,
            trajectory.sample_index,
            turn,
            trajectory.group_id,
            None if task_id is None else str(task_id),
        )
        started = time.perf_counter()
        version_before = getattr(self.backend, "policy_version", 0)
        generation = await self.backend.generate(trajectory.ids, params, context)
        trajectory.timings["generate_s"] += time.perf_counter() - started
        ids = list(generation.token_ids)
        self.sampled_tokens += len(ids)
        trajectory.token_exact = trajectory.token_exact and generation.token_exact
        trajectory.append(
            "assistant",
            ids,
            sampled=True,
            logprobs=generation.logprobs,
            finish_reason=generation.finish_reason,
            policy_version=(
                version_before if generation.policy_version is None else generation.policy_version
            ),
        )
        chain.turn_closed = bool(ids) and ids[-1] in self._eot_ids
        body = ids[:-1] if chain.turn_closed else ids
        text = self.chat.decode(body)
        parser = chain.tools.parser
        parsed = await parse_turn(parser, text)
        plan = plan_turn(parsed, parser, self.settings.max_calls_per_turn, self.settings.no_call)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if parsed.reasoning is not None:
            message["reasoning_content"] = parsed.reasoning
        for i, call in enumerate(plan.calls):
            call.id = call.id or f"call_{turn}_{i}"
        if plan.calls:
            message["tool_calls"] = [_openai_call(c) for c in plan.calls]
        chain.messages.append(message)
        if generation.finish_reason == "abort":
            trajectory.finish_reason = "abort"
            trajectory.error = generation.info.get("error", "the backend aborted the request")
        elif generation.finish_reason == "length":
            trajectory.finish_reason = "length"  # cut mid-turn: recorded, never silent
        elif plan.is_final:
            trajectory.finish_reason = "answer"
        if trajectory.finish_reason:
            trajectory.prediction = _said(parsed)
        elif parsed.answer is not None and not plan.calls:
            trajectory.prediction = parsed.answer
            trajectory.finish_reason = "answer"
        return plan

    async def _run_tools(self, chain: _Chain, turn: int, plan: TurnPlan) -> list[ToolResult]:
        started = time.perf_counter()
        if len(plan.calls) == 1:  # the common case: no extra task
            results = [await self._call(chain, plan.calls[0])]
        else:
            results = list(await asyncio.gather(*(self._call(chain, c) for c in plan.calls)))

        chain.trajectory.timings["tools_s"] += time.perf_counter() - started
        for result in results + plan.errors:
            # what the model reads goes through its tokenizer: no lone surrogates in it
            result.observation = replace_surrogates(result.observation)
        for call, result in zip(plan.calls, results, strict=True):
            result.info["call_id"] = call.id
        chain.trajectory.tool_calls.extend(_call_records(turn, plan, results))
        chain.trajectory.env_reports.extend(tool_reports(turn, plan.calls, results))
        everything = results + plan.errors
        chain.errors += sum(1 for r in everything if not r.ok)
        return everything

    async def _call(self, chain: _Chain, call: ToolCall) -> ToolResult:
        """Run one call; whatever goes wrong (an env that fails to start, too) is an error
        observation, so that the other calls of the turn and the chain go on. An env that
        cannot start because of its configuration stops the rollout instead."""
        try:
            return await self._call_tool(chain, call)
        except (asyncio.CancelledError, EnvConfigError):
            raise
        except Exception as exc:
            return ToolResult.error(
                f"tool '{call.name}' could not run: {type(exc).__name__}: {exc}",
                ToolErrorKind.EXCEPTION,
                tool=call.name,
            )

    async def _call_tool(self, chain: _Chain, call: ToolCall) -> ToolResult:
        tools = chain.tools.tools
        tool = tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(tools)) or "none"
            return ToolResult.error(
                f"unknown tool '{call.name}'; the available tools are: {known}",
                ToolErrorKind.UNKNOWN_TOOL,
                tool=call.name,
            )
        arguments = _coerce_arguments(tool, call.arguments)
        env = await self._env(chain, tool.env) if tool.env else None
        return await tool.invoke(arguments, env=env, **self._invoke_options)

    async def _env(self, chain: _Chain, name: str) -> Any:
        """The chain's env of that name (its lease: :meth:`_Chain.lease`)."""
        return (await chain.lease(self.envs, name)).env


async def score_chain(reward: Any, trajectory: Trajectory) -> None:
    """Score a finished chain with ``reward`` (none: left unscored)."""
    if reward is None:
        return
    started = time.perf_counter()
    result = await reward.score(trajectory.prediction, trajectory, trajectory.task)
    trajectory.timings["reward_s"] = round(time.perf_counter() - started, 6)
    trajectory.reward = float(result.reward)
    extras = dict(result.extras)
    if result.failed:
        extras["error"] = result.error
    trajectory.reward_extras = extras


def _call_records(turn: int, plan: TurnPlan, results: list[ToolResult]) -> list[ToolCallRecord]:
    """The trajectory's records of a turn's calls, and of the calls that failed to parse."""
    records = [
        ToolCallRecord(
            turn=turn,
            id=call.id,
            name=call.name,
            arguments=call.arguments,
            observation=result.observation,
            status=result.status,
            error_kind=result.error_kind,
            latency_s=float(result.info.get("latency_s", 0.0)),
            terminal=result.terminal,
            info=call_info(result.info),
        )
        for call, result in zip(plan.calls, results, strict=True)
    ]
    for error in plan.errors:
        records.append(
            ToolCallRecord(
                turn=turn,
                id="",
                name="",
                arguments=error.info.get("raw", ""),
                observation=error.observation,
                status="error",
                error_kind=error.error_kind,
            )
        )
    return records


def chain_limit(
    concurrency: int, tools: Sequence[Tool], envs: ResourceManager, extra_envs: Any = ()
) -> int:
    """Chains in flight at once: ``concurrency``, but no more than the smallest pool of an env
    the tools (or ``extra_envs``, such as the env of the tasks' own tools) use. A chain keeps
    its env until it ends, so chains beyond the pool's cap would queue for one and, past
    ``acquire_timeout``, fail; a warning says so and how to run more."""
    used = {t.env for t in tools if t.env} | set(extra_envs)
    caps = {name: envs.pool_max(name) for name in sorted(used)}
    caps = {name: cap for name, cap in caps.items() if cap is not None}
    if not caps:
        return concurrency
    name = min(caps, key=caps.get)
    if caps[name] >= concurrency:
        return concurrency
    log.warning(
        "rollout.concurrency is %d, but a chain holds its '%s' env until it ends and the pool "
        "has at most %d: %d chains run at once (raise envs.%s.pool_max to run more)",
        concurrency,
        name,
        caps[name],
        caps[name],
        name,
    )
    return caps[name]


def _require_envs(names: set[str], specs: Mapping[str, Any]) -> None:
    missing = sorted(name for name in names if name not in specs)
    if missing:
        raise ValueError(f"tools need envs that were not given: {', '.join(missing)}")


def _said(parsed: Any) -> str:
    """A turn's prediction: the format's answer, else its text beside the calls."""
    return parsed.answer if parsed.answer is not None else parsed.content


def _openai_call(call: ToolCall) -> dict[str, Any]:
    arguments = call.arguments
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


def _coerce_arguments(tool: Tool, arguments: Any) -> Any:
    """Plain text for a one-argument tool (ReAct ``Action Input: 2+3``) becomes that argument."""
    if isinstance(arguments, str) and not arguments.lstrip().startswith(("{", "[")):
        properties = list(tool.parameters.get("properties", {}))
        if len(properties) == 1:
            return {properties[0]: arguments.strip()}
    return arguments


async def _all_or_nothing(jobs: list[Any]) -> list[Any]:
    """Every job's result in order; the first job to raise cancels the others (and is awaited
    with them) before its exception propagates, so no chain outlives a failed rollout."""
    tasks = [asyncio.ensure_future(job) for job in jobs]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        pending = [task for task in tasks if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
    failures = [t.exception() for t in tasks if not t.cancelled() and t.exception() is not None]
    if failures:
        raise failures[0]
    return [task.result() for task in tasks]


def warn_if_prompts_too_long(trajectories: Sequence[Trajectory], limit: int) -> bool:
    """Warn (and return True) when first prompts left no room for a turn: chains that ended
    with finish ``length`` before their first turn."""
    cut = [t for t in trajectories if t.finish_reason == "length" and not t.num_turns]
    if not cut:
        return False
    log.warning(
        "warning: %d of %d chains ended before their first turn (finish 'length'): their "
        "first prompt has up to %d tokens, and rollout.max_total_tokens is %d; raise "
        "rollout.max_total_tokens (or shorten the prompt)",
        len(cut),
        len(trajectories),
        max(len(t.ids) for t in cut),
        limit,
    )
    return True
