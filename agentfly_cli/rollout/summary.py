"""Numbers that describe a rollout: rewards, turns, tool use, errors, finish reasons, speed,
and pass@k / mean@k for evaluation."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

from agentfly_cli.rollout.infra_failures import infra_failure
from agentfly_cli.trajectory import Trajectory, episode_ends


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 6) if values else None


def summarize(trajectories: Sequence[Trajectory], wall_s: float | None = None) -> dict[str, Any]:
    """Aggregate statistics of a list of trajectories (rewards and ``chains``: one per
    episode, an agent episode's segments counted once)."""
    rewards = [t.reward for t in episode_ends(trajectories) if t.reward is not None]
    turns = [t.num_turns for t in trajectories]
    calls: dict[str, dict[str, int]] = defaultdict(lambda: {"calls": 0, "errors": 0})
    error_kinds: Counter[str] = Counter()
    for trajectory in trajectories:
        for call in trajectory.tool_calls:
            name = call.name or "(unparsed)"
            calls[name]["calls"] += 1
            if call.status != "ok":
                calls[name]["errors"] += 1
                error_kinds[call.error_kind or "error"] += 1
    sampled = sum(sum(t.loss_mask) for t in trajectories)
    summary: dict[str, Any] = {
        "chains": len(episode_ends(trajectories)),
        "tasks": len({t.task_index for t in trajectories}),
        "reward_mean": _mean(rewards),
        "reward_max": max(rewards) if rewards else None,
        "reward_min": min(rewards) if rewards else None,
        "turns_mean": _mean(turns),
        "turns_max": max(turns) if turns else None,
        "tool_calls": {name: dict(v) for name, v in sorted(calls.items())},
        "error_kinds": dict(error_kinds.most_common()),
        "finish_reasons": dict(Counter(t.finish_reason for t in trajectories).most_common()),
        "sampled_tokens": sampled,
        "total_tokens": sum(len(t.ids) for t in trajectories),
        "token_exact": all(t.token_exact for t in trajectories),
        "aborted": [t.error for t in trajectories if t.finish_reason == "abort"][:3],
    }
    if wall_s is not None:
        summary["wall_s"] = round(wall_s, 3)
        summary["sampled_tokens_per_s"] = round(sampled / wall_s, 1) if wall_s > 0 else None
    return summary


def pass_at_k(n: int, correct: int, k: int) -> float:
    """Unbiased pass@k (Chen et al., 2021) from ``n`` samples of which ``correct`` passed."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - correct < k:
        return 1.0
    return 1.0 - math.comb(n - correct, k) / math.comb(n, k)


def ks_for(n: int) -> list[int]:
    """The k values reported for ``n`` samples per task: 1, 2, 4, ... and n."""
    ks = []
    k = 1
    while k < n:
        ks.append(k)
        k *= 2
    ks.append(n)
    return ks


def infra_failed_chains(trajectories: Sequence[Trajectory]) -> dict[int, str]:
    """The chains (``id`` of their :func:`episode_ends` trajectory) that an infrastructure
    failure ended, with its cause; an agent episode counts when any segment failed so."""
    cause_of: dict[Any, str] = {}
    for trajectory in trajectories:
        cause = infra_failure(trajectory)
        if cause is not None:
            cause_of.setdefault(trajectory.meta.get("episode", id(trajectory)), cause)
    return {
        id(end): cause_of[key]
        for end in episode_ends(trajectories)
        if (key := end.meta.get("episode", id(end))) in cause_of
    }


def evaluate(trajectories: Sequence[Trajectory], threshold: float = 1.0) -> dict[str, Any]:
    """pass@k and mean@k per task and overall. A chain passes when its reward >= threshold;
    an agent episode is one chain, however many segments it has. A chain that an
    infrastructure failure ended (:func:`~agentfly_cli.rollout.infra_failures.infra_failure`:
    an env that did not start or died, a backend, gateway or reward failure) is not a sample
    of the policy: it is left out and counted by cause in ``overall["infra_failures"]`` and
    the task's ``infra_failed``; ``n`` is then the fewest chains any task has left, and a task
    left with none is counted in ``overall["unscored_tasks"]``."""
    failed = infra_failed_chains(trajectories)
    by_task: dict[int, list[Trajectory]] = defaultdict(list)
    lost: Counter[int] = Counter()
    for trajectory in episode_ends(trajectories):
        if id(trajectory) in failed:
            lost[trajectory.task_index] += 1
            by_task.setdefault(trajectory.task_index, [])
        else:
            by_task[trajectory.task_index].append(trajectory)
    unscored = [index for index, group in by_task.items() if not group]
    for index in unscored:
        del by_task[index]
    if not by_task:
        overall_none: dict[str, Any] = {}
        if failed:
            overall_none = _infra_counts(failed, len(unscored))
        return {"tasks": [], "overall": overall_none, "threshold": threshold}
    n = min(len(group) for group in by_task.values())
    ks = ks_for(n)
    rows = []
    for task_index in sorted(by_task):
        group = by_task[task_index][:n]
        rewards = [t.reward if t.reward is not None else 0.0 for t in group]
        correct = sum(1 for r in rewards if r >= threshold)
        row: dict[str, Any] = {
            "task_index": task_index,
            "id": group[0].task.get("id"),
            "n": n,
            "correct": correct,
            f"mean@{n}": round(sum(rewards) / n, 6),
        }
        if lost[task_index]:
            row["infra_failed"] = lost[task_index]
        for k in ks:
            row[f"pass@{k}"] = round(pass_at_k(n, correct, k), 6)
        rows.append(row)
    overall: dict[str, Any] = {"tasks": len(rows), "n": n}
    for key in [f"pass@{k}" for k in ks] + [f"mean@{n}"]:
        overall[key] = round(sum(r[key] for r in rows) / len(rows), 6)
    if failed:
        overall.update(_infra_counts(failed, len(unscored)))
    return {"tasks": rows, "overall": overall, "threshold": threshold}


def _infra_counts(failed: dict[int, str], unscored: int) -> dict[str, Any]:
    counts = dict(Counter(failed.values()).most_common())
    return {"infra_failures": counts, "unscored_tasks": unscored}
