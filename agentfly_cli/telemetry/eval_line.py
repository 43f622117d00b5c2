"""The console line of a held-out evaluation during training."""

from __future__ import annotations

from collections.abc import Mapping


def format_eval_line(steps_done: int, metrics: Mapping[str, float]) -> str:
    """One plain line, e.g. ``eval after 5 steps | reward 0.312 | pass@1 0.300 | 16 tasks 9.1s``
    (``eval before step 1 | ...`` for the eval before training)."""
    done = f"after {steps_done} step{'s' if steps_done != 1 else ''}"
    parts = [f"eval {done}" if steps_done else "eval before step 1"]
    if "eval/reward_mean" in metrics:
        parts.append(f"reward {metrics['eval/reward_mean']:.3f}")
    for key in sorted((k for k in metrics if k.startswith("eval/pass@")), key=_k_order):
        parts.append(f"{key.removeprefix('eval/')} {metrics[key]:.3f}")
    if "eval/tasks" in metrics:
        parts.append(f"{metrics['eval/tasks']:.0f} tasks {metrics.get('eval/seconds', 0):.1f}s")
    return " | ".join(parts)


def _k_order(key: str) -> int:
    return int(key.rsplit("@", 1)[1])
