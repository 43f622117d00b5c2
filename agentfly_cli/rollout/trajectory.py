"""The trajectory record: one chain, token-exact, with its loss mask, turns and scores.

``ids[loss_mask == 1]`` is exactly the concatenation of every assistant turn's ``sampled_ids``.
Written as one JSON object per line (JSONL) and read back with :func:`read_trajectories`; lone
surrogates in model output are escaped, so every record is valid UTF-8 and reads back unchanged.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.surrogates import json_line

FINISH_REASONS = ("answer", "terminal_tool", "max_turns", "length", "errors", "abort")


@dataclass
class Turn:
    """A span of ``ids``: ``ids[start:end]`` belongs to one role."""

    role: str  # "prompt", "assistant" or "observation"
    start: int
    end: int
    sampled_ids: list[int] | None = None  # assistant turns: the ids exactly as sampled
    finish_reason: str | None = None  # assistant turns: the backend's stop / length / abort
    policy_version: int | None = None  # assistant turns: the weight version that sampled them


@dataclass
class ToolCallRecord:
    """One tool call of an assistant turn and what came back."""

    turn: int  # assistant turn number, from 0
    id: str
    name: str
    arguments: Any
    observation: str
    status: str  # "ok" or "error"
    error_kind: str | None = None
    latency_s: float = 0.0
    terminal: bool = False


@dataclass
class Trajectory:
    """One agent chain, ready for training or inspection."""

    ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    reward: float | None = None
    reward_extras: dict[str, Any] = field(default_factory=dict)
    finish_reason: str = ""
    group_id: str = ""
    task_index: int = 0
    sample_index: int = 0
    task: dict[str, Any] = field(default_factory=dict)
    prediction: str | None = None
    token_exact: bool = True
    error: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    # -- building ------------------------------------------------------------------------------
    def append(self, role: str, ids: list[int], *, sampled: bool, logprobs=None, **turn) -> Turn:
        """Append a span; sampled spans are trained (mask 1) and keep their logprobs."""
        start = len(self.ids)
        self.ids.extend(ids)
        self.loss_mask.extend([1 if sampled else 0] * len(ids))
        if sampled and logprobs is not None and len(logprobs) == len(ids):
            self.logprobs.extend(float(x) for x in logprobs)
        else:
            self.logprobs.extend([None] * len(ids))
        span = Turn(role, start, len(self.ids), list(ids) if sampled else None, **turn)
        self.turns.append(span)
        return span

    # -- reading -------------------------------------------------------------------------------
    @property
    def num_turns(self) -> int:
        """Assistant turns."""
        return sum(1 for t in self.turns if t.role == "assistant")

    @property
    def sampled_ids(self) -> list[int]:
        """Every sampled id, in order."""
        out: list[int] = []
        for turn in self.turns:
            if turn.sampled_ids is not None:
                out.extend(turn.sampled_ids)
        return out

    def token_versions(self) -> list[int | None]:
        """Per id, the weight version that sampled it (None: not sampled, or not recorded)."""
        out: list[int | None] = [None] * len(self.ids)
        for turn in self.turns:
            if turn.sampled_ids is not None and turn.policy_version is not None:
                out[turn.start : turn.end] = [turn.policy_version] * (turn.end - turn.start)
        return out

    @property
    def oldest_version(self) -> int | None:
        """The oldest weight version among its sampled turns (None when none is recorded)."""
        versions = [
            t.policy_version
            for t in self.turns
            if t.sampled_ids is not None and t.policy_version is not None
        ]
        return min(versions) if versions else None

    def check(self) -> None:
        """Raise ValueError unless the record is consistent and token-exact."""
        n = len(self.ids)
        if len(self.loss_mask) != n or len(self.logprobs) != n:
            raise ValueError(
                f"ids ({n}), loss_mask ({len(self.loss_mask)}) and logprobs "
                f"({len(self.logprobs)}) differ in length"
            )
        if any(m not in (0, 1) for m in self.loss_mask):
            raise ValueError("loss_mask holds values other than 0 and 1")
        position = 0
        for turn in self.turns:
            if turn.start != position or turn.end < turn.start:
                raise ValueError(f"turn spans are not contiguous at {turn.start}")
            position = turn.end
            if turn.sampled_ids is not None and self.ids[turn.start : turn.end] != turn.sampled_ids:
                raise ValueError(f"assistant span {turn.start}:{turn.end} != its sampled_ids")
        if position != n:
            raise ValueError(f"turn spans cover {position} of {n} ids")
        trained = [i for i, m in zip(self.ids, self.loss_mask, strict=True) if m]
        if trained != self.sampled_ids:
            raise ValueError("ids[loss_mask] differs from the concatenation of sampled_ids")
        for i, (m, lp) in enumerate(zip(self.loss_mask, self.logprobs, strict=True)):
            if not m and lp is not None:
                raise ValueError(f"position {i} is masked but has a logprob")

    # -- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        data = dict(data)
        turns = [Turn(**t) for t in data.pop("turns", [])]
        calls = [ToolCallRecord(**c) for c in data.pop("tool_calls", [])]
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown trajectory fields: {', '.join(sorted(unknown))}")
        return cls(turns=turns, tool_calls=calls, **data)


def write_trajectories(path: str | os.PathLike, trajectories: Iterable[Trajectory]) -> int:
    """Write trajectories as JSONL; return how many."""
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for trajectory in trajectories:
            out.write(json_line(trajectory.to_dict()) + "\n")
            count += 1
    return count


def check_output_path(path: str | os.PathLike) -> Path:
    """Fail early, before any model loads, when ``path`` cannot take a JSONL file."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"--out {str(path)!r} is a folder; pass a file name such as out.jsonl")
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise UserError(f"--out {str(path)!r} cannot be written; pick a writable folder")
    return path


class TrajectoryWriter:
    """Append trajectories to a JSONL file as they finish (flushed per line)."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115
        self.count = 0

    def write(self, trajectory: Trajectory) -> None:
        self._file.write(json_line(trajectory.to_dict()) + "\n")
        self._file.flush()
        self.count += 1

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_trajectories(path: str | os.PathLike) -> Iterator[Trajectory]:
    """Read a trajectory JSONL file line by line; bad lines are a UserError naming the line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(
            f"trajectory file {str(path)!r} not found; pass the --out file of a rollout"
        )
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                yield Trajectory.from_dict(json.loads(line))
            except (ValueError, TypeError) as exc:
                raise UserError(
                    f"{path}:{number} is not a trajectory record ({exc}); "
                    "pass a JSONL file written by `agentfly rollout --out`"
                ) from None


def read_trajectories(path: str | os.PathLike) -> list[Trajectory]:
    """All trajectories of a JSONL file."""
    return list(iter_trajectories(path))
