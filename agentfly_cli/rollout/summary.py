"""Numbers that describe a rollout: rewards, turns, tool use, errors, finish reasons, speed,
and pass@k / mean@k for evaluation."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Any

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


def evaluate(trajectories: Sequence[Trajectory], threshold: float = 1.0) -> dict[str, Any]:
    """pass@k and mean@k per task and overall. A chain passes when its reward >= threshold;
    an agent episode is one chain, however many segments it has."""
    by_task: dict[int, list[Trajectory]] = defaultdict(list)
    for trajectory in episode_ends(trajectories):
        by_task[trajectory.task_index].append(trajectory)
    if not by_task:
        return {"tasks": [], "overall": {}, "threshold": threshold}
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
        for k in ks:
            row[f"pass@{k}"] = round(pass_at_k(n, correct, k), 6)
        rows.append(row)
    overall: dict[str, Any] = {"tasks": len(rows), "n": n}
    for key in [f"pass@{k}" for k in ks] + [f"mean@{n}"]:
        overall[key] = round(sum(r[key] for r in rows) / len(rows), 6)
    return {"tasks": rows, "overall": overall, "threshold": threshold}
