"""What the chains of a ``scienceworld`` run did with ``focus on`` (cited in docs/learning.md).

For each trajectory file (``agentfly eval --out``, or a run's ``trajectories/*.jsonl``): the
mean reward, the mean per task type, completed chains, and each chain's first ``focus on``
that named a thing the game knows, counted from the turn after the task's question (the
prompt's worked example is not the chain's play):

- ``right``: the score rose; ``wrong``: the task failed; ``other``: neither;
- ``unknown_only``: every focus named a thing that is not there ("No known action matches");
- ``never``: the chain did not try a focus.

Run: .venv/bin/python scripts/scienceworld_focus.py FILE.jsonl [FILE.jsonl ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.trajectory import Trajectory, read_trajectories

SCORE = re.compile(r"Score: (-?\d+)/100")
KINDS = ("right", "wrong", "other", "unknown_only", "never")


def actions(trajectory: Trajectory) -> list[tuple[str, str]]:
    """(action, observation) pairs of the chain's own turns, after the task's question."""
    messages = trajectory.messages
    question = trajectory.task["question"]
    starts = [i for i, m in enumerate(messages) if m["role"] == "user" and m["content"] == question]
    if not starts:
        raise ValueError(f"task {trajectory.task.get('id')}: its question is not in the chat")
    pairs = []
    for i in range(starts[-1] + 1, len(messages)):
        if messages[i]["role"] == "assistant":
            action = messages[i]["content"].replace("ACTION:", "", 1).strip()
            reply = messages[i + 1]["content"] if i + 1 < len(messages) else ""
            pairs.append((action, reply))
    return pairs


def first_focus(pairs: list[tuple[str, str]]) -> str:
    """The kind (one of KINDS) of the chain's first focus on a thing the game knows."""
    kind, score = "never", None
    for action, reply in pairs:
        match = SCORE.search(reply)
        if action.lower().startswith("focus on"):
            if reply.startswith("No known action"):
                kind = "unknown_only"
            elif "has failed" in reply:
                return "wrong"
            elif match and score is not None and int(match.group(1)) > score:
                return "right"
            else:
                return "other"
        if match:
            score = int(match.group(1))
    return kind


def summarize(rows: list[Trajectory]) -> dict[str, Any]:
    by_type: dict[str, list[float]] = defaultdict(list)
    kinds: Counter[str] = Counter()
    rewards = [row.reward or 0.0 for row in rows]  # no reward (a failed chain): 0
    for row, reward in zip(rows, rewards, strict=True):
        by_type[row.task["task_name"]].append(reward)
        kinds[first_focus(actions(row))] += 1
    return {
        "chains": len(rows),
        "mean": round(statistics.mean(rewards), 4) if rows else None,
        "completed": sum(reward >= 1.0 for reward in rewards),
        "first_focus": {kind: kinds[kind] for kind in KINDS},
        "by_type": {name: round(statistics.mean(v), 4) for name, v in sorted(by_type.items())},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--json", action="store_true", help="one JSON object per file")
    args = parser.parse_args(argv)
    for path in args.files:
        try:
            rows = read_trajectories(path)
        except UserError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        result = {"file": str(path), **summarize(rows)}
        if args.json:
            print(json.dumps(result))
            continue
        print(f"{path}: {result['chains']} chains, mean {result['mean']}, "
              f"completed {result['completed']}")  # fmt: skip
        print("  first focus: " + ", ".join(f"{k} {v}" for k, v in result["first_focus"].items()))
        print("  by type: " + ", ".join(f"{k} {v}" for k, v in result["by_type"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
