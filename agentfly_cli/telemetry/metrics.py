"""Per-step training metrics: rollout statistics and a wall-clock split of the step."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from agentfly_cli.trajectory import FINISH_REASONS, Trajectory, episode_ends

PARSE_ERROR_TOOL = "_parse_error"
STANDARD_SECTIONS = ("rollout", "train", "sync")


def rollout_metrics(trajectories: Iterable[Trajectory]) -> dict[str, float]:
    """Flat metrics of one step's trajectories.

    Keys: ``reward/{mean,std,min,max}`` (population std), ``turns/mean``, ``tokens/sampled``
    (sum of loss masks), ``tokens/total``, ``tools/calls/<name>`` (calls that failed to parse
    have no name and count as ``tools/calls/_parse_error``), ``tools/calls_total``,
    ``tools/errors`` (calls with status "error", i.e. error observations),
    ``tools/errors/<kind>`` (those by error kind: ``invalid_json``, ``unparsed_call`` for
    tool-call markup the parser does not read, ``too_many_calls``, ...; see ``ToolErrorKind``),
    ``tools/error_rate``, ``finish/<reason>`` (fraction of trajectories, one key per reason
    in FINISH_REASONS, plus any other reason seen; an empty reason counts as "unknown") and
    ``rollout/trajectories``.

    The reward statistics are over episodes (an agent episode's segments count once;
    ``rollout/episodes``, where they are fewer than the trajectories); the others over
    trajectories.

    ``reward/groups_with_spread`` is the share of groups (chains of one task) whose rewards
    differ: a group-relative advantage (GRPO, RLOO) learns only from those.

    Trajectories whose reward is None (not scored) are skipped for the reward statistics
    only; with no scored trajectory the reward keys are absent. The greedy chains ReMax rolls
    out as its baseline (``meta["greedy"]``) are not in ``reward/*`` either:
    ``reward/greedy_mean`` is their mean.
    """
    trajectories = list(trajectories)
    count = len(trajectories)
    out: dict[str, float] = {"rollout/trajectories": float(count)}
    episodes = episode_ends(trajectories)
    if len(episodes) != count:
        out["rollout/episodes"] = float(len(episodes))

    greedy = [float(t.reward) for t in episodes if t.meta.get("greedy") and t.reward is not None]
    if greedy:  # ReMax's baseline chains: scored, not trained, not in reward/*
        out["reward/greedy_mean"] = sum(greedy) / len(greedy)
    episodes = [t for t in episodes if not t.meta.get("greedy")]
    rewards = [float(t.reward) for t in episodes if t.reward is not None]
    if rewards:
        mean = sum(rewards) / len(rewards)
        out["reward/mean"] = mean
        out["reward/std"] = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
        out["reward/min"] = min(rewards)
        out["reward/max"] = max(rewards)

    spread = groups_with_spread(episodes)
    if spread is not None:
        out["reward/groups_with_spread"] = spread

    out["turns/mean"] = sum(t.num_turns for t in trajectories) / count if count else 0.0
    out["tokens/sampled"] = float(sum(sum(t.loss_mask) for t in trajectories))
    out["tokens/total"] = float(total_tokens(trajectories))

    calls = [call for t in trajectories for call in t.tool_calls]
    per_tool: dict[str, int] = {}
    for call in calls:
        name = call.name or PARSE_ERROR_TOOL
        per_tool[name] = per_tool.get(name, 0) + 1
    for name in sorted(per_tool):
        out[f"tools/calls/{name}"] = float(per_tool[name])
    errors = sum(1 for call in calls if call.status == "error")
    out["tools/calls_total"] = float(len(calls))
    out["tools/errors"] = float(errors)
    kinds: dict[str, int] = {}
    for call in calls:
        if call.status == "error":
            kind = call.error_kind or "error"
            kinds[kind] = kinds.get(kind, 0) + 1
    for kind in sorted(kinds):
        out[f"tools/errors/{kind}"] = float(kinds[kind])
    out["tools/error_rate"] = errors / len(calls) if calls else 0.0

    reasons = {reason: 0 for reason in FINISH_REASONS}
    for t in trajectories:
        reason = t.finish_reason or "unknown"
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason, n in reasons.items():
        out[f"finish/{reason}"] = n / count if count else 0.0
    return out


def groups_with_spread(trajectories: Iterable[Trajectory]) -> float | None:
    """The share of groups of two or more scored chains whose rewards are not all equal;
    None when there is no such group."""
    groups: dict[str, list[float]] = {}
    for t in trajectories:
        if t.reward is not None:
            groups.setdefault(t.group_id, []).append(float(t.reward))
    sizable = [rewards for rewards in groups.values() if len(rewards) > 1]
    if not sizable:
        return None
    return sum(1 for r in sizable if max(r) - min(r) > 1e-9) / len(sizable)


def total_tokens(trajectories: Iterable[Trajectory]) -> int:
    """Every token (prompt, sampled and observation) of the trajectories."""
    return sum(len(t.ids) for t in trajectories)


class StepTimer:
    """Wall-clock split of one training step.

    >>> timer = StepTimer()
    >>> with timer.section("rollout"):
    ...     pass
    >>> sorted(timer.metrics(tokens=0))[:2]
    ['throughput/tokens_per_s', 'time/rollout_s']

    The step clock starts at construction and at :meth:`reset`. A section entered twice adds
    up. ``rollout``, ``train`` and ``sync`` are always reported (0 when not measured).
    ``time/cpu_s`` is the CPU time the whole process used during the step (every thread: the
    update, the rollouts' forward passes, an async producer's batches) and ``cpu/cores_busy``
    that over the step's wall time: near the machine's core count, a step is CPU-bound and
    overlapping its phases cannot make it shorter.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        self._clock = clock
        self._cpu_clock = cpu_clock
        self.reset()

    def reset(self) -> None:
        """Start a new step: the step clock restarts and every section is back to 0."""
        self._start = self._clock()
        self._cpu_start = self._cpu_clock()
        self.sections: dict[str, float] = {}

    @contextmanager
    def section(self, name: str) -> Iterator[None]:
        """Time the ``with`` body under ``time/<name>_s`` (also when the body raises)."""
        begin = self._clock()
        try:
            yield
        finally:
            self.sections[name] = self.sections.get(name, 0.0) + self._clock() - begin

    def elapsed(self) -> float:
        """Seconds since the step began."""
        return self._clock() - self._start

    def metrics(self, tokens: int | float = 0) -> dict[str, float]:
        """``time/<section>_s``, ``time/step_s``, ``time/cpu_s``, ``cpu/cores_busy`` and
        ``throughput/tokens_per_s``.

        ``tokens`` is what the step processed: the total tokens of its trajectories (see
        :func:`total_tokens`).
        """
        step = self.elapsed()
        out = {f"time/{name}_s": 0.0 for name in STANDARD_SECTIONS}
        out.update({f"time/{name}_s": seconds for name, seconds in self.sections.items()})
        out["time/step_s"] = step
        cpu = self._cpu_clock() - self._cpu_start
        out["time/cpu_s"] = cpu
        out["cpu/cores_busy"] = cpu / step if step > 0 else 0.0
        out["throughput/tokens_per_s"] = tokens / step if step > 0 else 0.0
        return out


def gpu_memory_metrics() -> dict[str, float]:
    """``memory/gpu_peak_gib``: the CUDA allocator's peak since the last call (then reset).

    Empty where torch was not imported or CUDA was never initialised (every CPU run): this
    never starts CUDA itself.
    """
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return {}
    peak = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    return {"memory/gpu_peak_gib": peak / 2**30}
