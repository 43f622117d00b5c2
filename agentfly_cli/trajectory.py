"""The trajectory record: one chain, token-exact, with its loss mask, turns and scores.

``ids[loss_mask == 1]`` is exactly the concatenation of every assistant turn's ``sampled_ids``.
Written as one JSON object per line (JSONL) and read back with :func:`read_trajectories`; lone
surrogates in model output are escaped, so every record is valid UTF-8 and reads back unchanged.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.files.output_paths import write_all
from agentfly_cli.files.surrogates import json_line

FINISH_REASONS = (
    "answer",
    "terminal_tool",
    "env_done",
    "max_turns",
    "length",
    "errors",
    "abort",
    "declared_call",  # a call to a task's declaration-only tool (task_tools.on_call: end)
)
#: keys of an env report (:attr:`Trajectory.env_reports`)
REPORT_KEYS = ("turn", "source", "reward", "done", "info")


@dataclass
class Turn:
    """A span of ``ids``: ``ids[start:end]`` belongs to one role."""

    role: str  # "prompt", "assistant" or "observation"
    start: int
    end: int
    sampled_ids: list[int] | None = None  # assistant turns: the ids exactly as sampled
    finish_reason: str | None = None  # assistant turns: the backend's stop / length / abort
    policy_version: int | None = None  # assistant turns: the weight version that sampled them
    episode_turn: int | None = None  # agent captures: the reply's number in its episode


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
    info: dict[str, Any] = field(default_factory=dict)  # what the tool reported (JSON-safe)


@dataclass
class Trajectory:
    """One agent chain, ready for training or inspection."""

    ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    # what envs and tools reported, in order: {turn, source, reward, done, info}
    env_reports: list[dict[str, Any]] = field(default_factory=list)
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

    @property
    def env_reward(self) -> float | None:
        """The sum of the rewards that envs and tools reported (None when none reported one)."""
        rewards = [r["reward"] for r in self.env_reports if r.get("reward") is not None]
        return float(sum(rewards)) if rewards else None

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
        """The record as JSON-able data, with the derived ``env_reward`` beside the fields."""
        return {**asdict(self), "env_reward": self.env_reward}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Trajectory:
        """A record from :meth:`to_dict`'s data (or an older record without the newer fields)."""
        data = dict(data)
        data.pop("env_reward", None)  # derived from env_reports
        turns = [Turn(**t) for t in data.pop("turns", [])]
        calls = [ToolCallRecord(**c) for c in data.pop("tool_calls", [])]
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown trajectory fields: {', '.join(sorted(unknown))}")
        return cls(turns=turns, tool_calls=calls, **data)


def episode_ends(trajectories: Iterable[Trajectory]) -> list[Trajectory]:
    """One trajectory per chain: each one, except that an agent episode of several segments
    (numbered in ``meta``: ``segment`` of ``segments``) counts once, by its last segment (all
    its segments carry the episode's reward)."""
    return [t for t in trajectories if t.meta.get("segment", 0) == t.meta.get("segments", 1) - 1]


def write_trajectories(path: str | os.PathLike, trajectories: Iterable[Trajectory]) -> int:
    """Write trajectories as JSONL, all or nothing (:func:`~agentfly_cli.files.output_paths.
    write_whole`: a temporary file renamed over ``path``; a device such as ``/dev/null`` is
    written in place). A failed write (a full disk) leaves ``path`` as it was and is one
    :class:`UserError`. Returns how many were written."""
    from agentfly_cli.files.output_paths import write_whole

    def write(out) -> int:
        count = 0
        for trajectory in trajectories:
            write_all(out.fileno(), _line(trajectory))
            count += 1
        return count

    return write_whole(path, write)


def _line(trajectory: Trajectory) -> bytes:
    return (json_line(trajectory.to_dict()) + "\n").encode("utf-8")


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
    """Append trajectories to a JSONL file as they finish, one whole line at a time.

    Each line goes to the disk before :meth:`write` returns. A write that fails (a full disk)
    cuts the file back to its last complete line and is one :class:`UserError`: the file never
    ends in half a record.
    """

    def __init__(self, path: str | os.PathLike, *, append: bool = False) -> None:
        """``append``: add lines after the file's own (``agentfly serve --record``)."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "ab" if append else "wb", buffering=0)  # noqa: SIM115
        self._seekable = self._file.seekable()  # a FIFO or pipe (--out /dev/stdout) is not
        if append and self._seekable:
            self._end_last_line()
        self._complete = self._file.tell() if self._seekable else 0  # bytes of complete lines
        self.count = 0

    def _end_last_line(self) -> None:
        """A file that ends mid-line (a crashed run's half record) is cut back to its last
        complete line; a whole record without its newline gets one. Appended lines then
        never glue onto it."""
        import json

        fd = self._file.fileno()
        with open(self.path, "rb") as source:
            size = os.fstat(source.fileno()).st_size
            start = size
            while start > 0:  # the last line's start: after the last newline
                step = min(start, 1 << 16)
                source.seek(start - step)
                found = source.read(step).rfind(b"\n")
                if found >= 0:
                    start -= step - found - 1
                    break
                start -= step
            if start == size:  # empty, or it ends with a newline
                return
            source.seek(start)
            tail = source.read()
        try:
            whole = isinstance(json.loads(tail), dict)
        except (ValueError, RecursionError):
            whole = False
        if whole:
            write_all(fd, b"\n")
        else:
            os.ftruncate(fd, start)

    def write(self, trajectory: Trajectory) -> None:
        try:
            write_all(self._file.fileno(), _line(trajectory))
        except OSError as err:
            self._cut_back()
            from agentfly_cli.files.output_paths import write_failed

            kept = f"its {self.count} complete lines are kept"
            raise write_failed(self.path, err, kept) from None
        if self._seekable:
            self._complete = os.lseek(self._file.fileno(), 0, os.SEEK_CUR)
        self.count += 1

    def _cut_back(self) -> None:
        """Truncate the file to its complete lines (best effort: the disk may be gone; a pipe
        cannot be cut back)."""
        if not self._seekable:
            return
        try:
            os.ftruncate(self._file.fileno(), self._complete)
            os.lseek(self._file.fileno(), self._complete, os.SEEK_SET)
        except OSError:
            pass

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


READ_FIX = "pass a JSONL file written by `agentfly rollout --out`"


def iter_trajectories(path: str | os.PathLike) -> Iterator[Trajectory]:
    """Read a trajectory JSONL file line by line; a bad line (not UTF-8, not JSON, not a
    trajectory record) is a UserError naming the file and the line."""
    from agentfly_cli.files.json_files import iter_json_lines

    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path} is a folder, not a trajectory file; {READ_FIX}")
    if not path.is_file():
        raise UserError(
            f"trajectory file {str(path)!r} not found; pass the --out file of a rollout"
        )
    for number, data in iter_json_lines(path, READ_FIX):
        yield record_from_json(data, f"{path}:{number}")


def record_from_json(data: Any, where: str) -> Trajectory:
    """A trajectory from one decoded JSON line, its shape checked (the types and lengths that
    readers index by); anything else is a UserError naming ``where``."""
    try:
        if not isinstance(data, dict):
            raise ValueError(f"a JSON {type(data).__name__}, not an object")
        trajectory = Trajectory.from_dict(data)
        _check_shape(trajectory)
    except (ValueError, TypeError, AttributeError) as exc:
        raise UserError(f"{where} is not a trajectory record ({exc}); {READ_FIX}") from None
    return trajectory


def _check_shape(t: Trajectory) -> None:
    """Raise ValueError unless ids, loss_mask, logprobs and turn spans fit together."""
    n = len(t.ids) if isinstance(t.ids, list) else -1
    if n < 0 or not all(type(i) is int and i >= 0 for i in t.ids):
        raise ValueError("ids must be a list of token ids (integers from 0)")
    if not isinstance(t.loss_mask, list) or len(t.loss_mask) != n:
        raise ValueError(f"loss_mask must be a list as long as ids ({n})")
    if any(m not in (0, 1) or type(m) is not int for m in t.loss_mask):
        raise ValueError("loss_mask must hold only 0 and 1")
    if not isinstance(t.logprobs, list) or len(t.logprobs) != n:
        raise ValueError(f"logprobs must be a list as long as ids ({n})")
    for turn in t.turns:
        if not (
            type(turn.start) is int and type(turn.end) is int and 0 <= turn.start <= turn.end <= n
        ):
            raise ValueError(f"a turn spans {turn.start}:{turn.end}, outside the {n} ids")
    if t.reward is not None and (
        isinstance(t.reward, bool) or not isinstance(t.reward, (int, float))
    ):
        raise ValueError(f"reward must be a number or null, not {t.reward!r}")
    if not isinstance(t.messages, list) or not all(isinstance(m, dict) for m in t.messages):
        raise ValueError("messages must be a list of objects")
    if not isinstance(t.meta, dict) or not isinstance(t.task, dict):
        raise ValueError("meta and task must be objects")
    if not all(isinstance(c.info, dict) for c in t.tool_calls):
        raise ValueError("tool_calls[].info must be objects")
    if not isinstance(t.env_reports, list):
        raise ValueError("env_reports must be a list of objects")
    for report in t.env_reports:
        _check_report(report)


def _check_report(report: Any) -> None:
    """Raise ValueError unless ``report`` is an env report: ``{turn, source, reward, done,
    info}``."""
    if not isinstance(report, dict) or set(report) != set(REPORT_KEYS):
        raise ValueError(f"env_reports hold objects with the keys {', '.join(REPORT_KEYS)}")
    reward = report["reward"]
    if type(report["turn"]) is not int or not isinstance(report["source"], str):
        raise ValueError("an env report's turn must be an integer and its source a string")
    if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
        raise ValueError(f"an env report's reward must be a number or null, not {reward!r}")
    if not isinstance(report["done"], bool) or not isinstance(report["info"], dict):
        raise ValueError("an env report's done must be true or false and its info an object")


def read_trajectories(path: str | os.PathLike) -> list[Trajectory]:
    """All trajectories of a JSONL file."""
    return list(iter_trajectories(path))
