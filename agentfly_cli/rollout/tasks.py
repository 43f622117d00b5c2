"""Tasks: dataset rows loaded from JSONL, JSON, Parquet or a ``datasets`` folder, as messages.

A row has ``question`` (rendered as the user message) or ``messages`` (a whole opening
conversation), plus any other fields; rewards receive those fields by name. With
``rollout.opening_env`` the env's reset gives the user message, so a row needs neither; a row's
``user_turns`` (``data.user_turns_field``) are checked here too (:class:`RowRules`).
"""

from __future__ import annotations

import functools
import json
import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.rollout.task_files import read_rows
from agentfly_cli.rollout.user_turns import check_user_turns

ROLES = {"system", "user", "assistant", "tool"}
MAX_NESTING = 100  # a task row deeper than this could not be written into a trajectory


@dataclass(frozen=True)
class RowRules:
    """What a run's settings ask of each row, beyond being an object."""

    needs_prompt: bool = True  # False with rollout.opening_env: the env gives the user message
    user_turns_field: str = "user_turns"  # data.user_turns_field

    @classmethod
    def of(cls, settings: Any) -> RowRules:
        """The rules of a ``RunSettings``."""
        return cls(settings.rollout.opening_env is None, settings.data.user_turns_field)


def held_out_indices(count: int, fraction: float, seed: int) -> set[int]:
    """The rows a seeded ``fraction`` of ``count`` holds out (at least one when > 0)."""
    import math
    import random

    if not fraction:
        return set()
    held = math.ceil(fraction * count)
    if held >= count:
        raise UserError(
            f"a holdout of {fraction:g} of {count} rows leaves none to train on; lower it or "
            "add data"
        )
    order = list(range(count))
    random.Random(f"{seed}:holdout").shuffle(order)
    return set(order[:held])


def load_tasks(
    path: str | Path,
    limit: int | None = None,
    where: Mapping[str, Any] | None = None,
    where_key: str = "data.where",
    *,
    holdout: float = 0.0,
    holdout_seed: int = 0,
    side: str = "all",
    shuffle_seed: int | None = None,
    rules: RowRules | None = None,
) -> list[dict[str, Any]]:
    """Read the task rows of a data file or folder; every row is checked (by ``rules``).

    With ``holdout``, ``side`` picks the rows that :func:`held_out_indices` holds out
    (``heldout``), the others (``train``) or all; drawn over the whole file, before ``where``
    keeps the rows whose fields match (see :func:`select_rows`), ``shuffle_seed`` (if not None)
    shuffles them (see :func:`shuffled`) and ``limit`` keeps the first ones.
    ``where``'s errors name the setting ``where_key``. :func:`read_tasks` then
    :func:`pick_tasks`: a run that needs several sides reads the file once.
    """
    return pick_tasks(
        read_tasks(path, rules), str(path), limit, where, where_key,
        holdout=holdout, holdout_seed=holdout_seed, side=side, shuffle_seed=shuffle_seed,
    )  # fmt: skip


def read_tasks(path: str | Path, rules: RowRules | None = None) -> list[dict[str, Any]]:
    """Every row of the data file or folder at ``path``, each checked as a task."""
    rows = read_rows(path)
    if not rows:
        raise UserError(f"data file {str(path)!r} has no rows")
    return check_tasks(rows, str(path), rules)


def check_tasks(
    rows: Sequence[Any], source: str, rules: RowRules | None = None
) -> list[dict[str, Any]]:
    """``rows`` as a list, each checked as a task (errors name ``source`` row N)."""
    for number, row in enumerate(rows, 1):
        check_task(row, f"{source} row {number}", rules)
    return list(rows)


def pick_tasks(
    rows: Sequence[dict[str, Any]],
    source: str,
    limit: int | None = None,
    where: Mapping[str, Any] | None = None,
    where_key: str = "data.where",
    *,
    holdout: float = 0.0,
    holdout_seed: int = 0,
    side: str = "all",
    shuffle_seed: int | None = None,
) -> list[dict[str, Any]]:
    """The rows of a whole (checked) data file that :func:`load_tasks` keeps, in memory."""
    rows = list(rows)
    if holdout and side != "all":
        held = held_out_indices(len(rows), holdout, holdout_seed)
        rows = [row for i, row in enumerate(rows) if (i in held) == (side == "heldout")]
    if where:
        rows = select_rows(rows, where, source, where_key)
    if shuffle_seed is not None:
        rows = shuffled(rows, shuffle_seed)
    return rows[:limit] if limit is not None else rows


def data_side(rows: Sequence[dict[str, Any]], data: Any, source: str) -> list[dict[str, Any]]:
    """The rows a run's ``data`` settings (a ``DataSettings``) read from a whole file's rows."""
    return pick_tasks(
        rows, source, data.limit, data.where,
        holdout=data.holdout, holdout_seed=data.holdout_seed, side=data.split,
        shuffle_seed=data.shuffle_seed if data.shuffle else None,
    )  # fmt: skip


def shuffled(rows: Sequence[Any], seed: int) -> list[Any]:
    """``rows`` in a seeded random order (``data.shuffle``): the same seed, the same order."""
    import random

    order = list(rows)
    random.Random(f"{seed}:shuffle").shuffle(order)
    return order


def select_rows(
    rows: Sequence[Any],
    where: Mapping[str, Any],
    source: str = "the data",
    key: str = "data.where",
) -> list[Any]:
    """The rows whose every ``where`` field equals its value, or one of a list of values.

    A value also matches its string form (``--where level=2`` keeps rows with ``"level": 2``
    or ``"level": "2"``). A field no row has, or a filter that keeps nothing, is a UserError
    that lists what the data holds.
    """
    kept = list(rows)
    for field, wanted in where.items():
        allowed = list(wanted) if isinstance(wanted, (list, tuple, set)) else [wanted]
        if not allowed:
            raise UserError(f"{key}.{field}: an empty list keeps no rows; give a value")
        present = [row for row in kept if isinstance(row, Mapping) and field in row]
        if not present:
            raise UserError(
                f"{key}.{field}: no row of {source} has a field {field!r}; "
                f"its fields: {_field_names(rows)}"
            )
        matched = [row for row in present if _matches(row[field], allowed)]
        if not matched:
            values = sorted({_show(row[field]) for row in present})
            shown = ", ".join(values[:20]) + (", ..." if len(values) > 20 else "")
            raise UserError(
                f"{key}.{field}={_show(wanted)} keeps none of {len(present)} rows of "
                f"{source}; its values: {shown}"
            )
        kept = matched
    return kept


def field_choices(rows: Sequence[Any], max_values: int = 20) -> dict[str, dict[str, int]]:
    """The fields that ``where`` can select on usefully, with the count of each value.

    A field qualifies when every row has it as a scalar (text, number, bool) and it takes 2 to
    ``max_values`` distinct values (so ids, questions and answers are left out).
    """
    choices: dict[str, dict[str, int]] = {}
    mappings = [row for row in rows if isinstance(row, Mapping)]
    if not mappings:
        return choices
    for name in dict.fromkeys(k for row in mappings for k in row):
        values = [row.get(name) for row in mappings]
        if any(v is None or isinstance(v, (dict, list)) for v in values):
            continue
        counts = Counter(_show(value) for value in values)
        if 2 <= len(counts) <= max_values and len(counts) < len(values):
            choices[str(name)] = dict(sorted(counts.items()))
    return choices


def _matches(value: Any, allowed: list[Any]) -> bool:
    for choice in allowed:
        if value == choice or (not isinstance(value, (dict, list)) and str(value) == str(choice)):
            return True
    return False


def _show(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _field_names(rows: Sequence[Any]) -> str:
    names: dict[str, None] = {}
    for row in rows[:100]:
        if isinstance(row, Mapping):
            names.update(dict.fromkeys(map(str, row)))
    return ", ".join(names) or "none"


def check_task(row: Any, where: str, rules: RowRules | None = None) -> None:
    """Raise a UserError unless ``row`` is an object with ``question`` or valid ``messages``
    (either may be absent when ``rules.needs_prompt`` is False), with valid user turns, nested
    at most :data:`MAX_NESTING` levels deep."""
    rules = rules or RowRules()
    if not isinstance(row, Mapping):
        raise UserError(f"{where}: expected a JSON object, got {type(row).__name__}")
    if nesting(row) > MAX_NESTING:
        raise UserError(
            f"{where}: nested more than {MAX_NESTING} levels of lists or objects deep; flatten "
            "it (writing such a row into a trajectory would pass Python's recursion limit)"
        )
    if "messages" in row:
        messages = row["messages"]
        if not isinstance(messages, list) or not messages:
            raise UserError(f"{where}: 'messages' must be a non-empty list of messages")
        for i, message in enumerate(messages):
            if not isinstance(message, Mapping) or message.get("role") not in ROLES:
                raise UserError(
                    f"{where}: messages[{i}] needs a role out of {', '.join(sorted(ROLES))}"
                )
            if not isinstance(message.get("content", ""), str):
                raise UserError(f"{where}: messages[{i}].content must be a string")
    elif "question" in row:
        if not isinstance(row["question"], str):
            raise UserError(f"{where}: 'question' must be a string")
    elif rules.needs_prompt:
        raise UserError(
            f"{where}: needs a 'question' field (the user message) or 'messages' (a conversation)"
        )
    check_user_turns(row, rules.user_turns_field, where)


def nesting(value: Any) -> int:
    """How many levels of lists and objects ``value`` nests (iterative: any depth is fine)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def opening_messages(
    task: Mapping[str, Any],
    system_prompt: str | None = None,
    examples: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The conversation a chain starts from: system prompt, worked examples, then the task.

    ``system_prompt`` may use the task's fields, e.g. ``{question}``; a task that brings its own
    system message keeps it.
    """
    if "messages" in task:
        task_messages = [dict(m) for m in task["messages"]]
    else:
        task_messages = [{"role": "user", "content": task["question"]}]
    messages: list[dict[str, Any]] = []
    own_system = task_messages and task_messages[0]["role"] == "system"
    if own_system:
        messages.append(task_messages.pop(0))
    elif system_prompt:
        messages.append({"role": "system", "content": _fill(system_prompt, task)})
    messages.extend(dict(m) for m in examples)
    messages.extend(task_messages)
    return messages


def check_system_prompt(
    system_prompt: str | None,
    tasks: Sequence[Mapping[str, Any]],
    source: str = "the data",
    key: str = "chat.system_prompt",
) -> None:
    """Raise a UserError unless every ``{field}`` of ``system_prompt`` fills from every task that
    uses it (a task with its own system message does not). Only ``{name}``, ``{name.attr}`` and
    ``{name[key]}`` (with an optional ``!r`` and format spec) are fields: other braces, such as a
    JSON example, are literal text; ``{{name}}`` is a literal ``{name}``."""
    if not system_prompt:
        return
    fields = [part for part in _prompt_parts(system_prompt) if isinstance(part, _Field)]
    if not fields:
        return
    escape = "write a literal brace as {{ or }}"
    using = [task for task in tasks if not _own_system(task)]
    for root in dict.fromkeys(field.root for field in fields):
        lacking = [task for task in using if root not in task]
        if lacking:
            names = ", ".join(map(str, lacking[0])) or "none"
            raise UserError(
                f"{key} uses {{{root}}}, which {len(lacking)} of the {len(using)} tasks of "
                f"{source} lack (the first has: {names}); fix the name or {escape}"
            )
    for field in fields:
        if field.source == f"{{{field.root}}}":
            continue  # a present field always fills
        for task in using:
            try:
                field.fill(task)
            except _FILL_ERRORS as exc:
                raise UserError(
                    f"{key}: {field.source} does not fit the tasks of {source} "
                    f"({type(exc).__name__}: {exc}); fix it or {escape}"
                ) from None


def _own_system(task: Mapping[str, Any]) -> bool:
    messages = task.get("messages")
    return (
        bool(messages) and isinstance(messages[0], Mapping) and messages[0].get("role") == "system"
    )


# A field: a name, then .attr or [key] parts, an optional !r/!s/!a and a format spec of
# str.format's mini-language (no spaces, so '{name: "calc"}' is text, not a field).
_FIELD = re.compile(
    r"\{(?P<name>[^\W\d]\w*(?:\.[^\W\d]\w*|\[[^\[\]{}]+\])*)(?P<conversion>![rsa])?"
    r"(?P<spec>:(?:[^{}]?[<>=^])?[-+]?z?#?0?\d*[,_]?(?:\.\d+)?[bcdeEfFgGnosxX%]?)?\}"
)
_FILL_ERRORS = (LookupError, AttributeError, ValueError, TypeError)


class _Field:
    def __init__(self, match: re.Match[str]) -> None:
        self.source = match.group(0)
        self.name = match.group("name")
        self.root = re.split(r"[.\[]", self.name, maxsplit=1)[0]
        self.conversion = (match.group("conversion") or "")[1:] or None
        self.spec = (match.group("spec") or ":")[1:]

    def fill(self, task: Mapping[str, Any]) -> str:
        formatter = string.Formatter()
        value, _ = formatter.get_field(self.name, (), task)
        return format(formatter.convert_field(value, self.conversion), self.spec)


@functools.lru_cache(maxsize=64)
def _prompt_parts(text: str) -> tuple[str | _Field, ...]:
    """``text`` as literal text and fields. ``{{`` is a literal ``{`` and the ``}}`` that closes
    it a literal ``}``; any other brace is itself (a JSON example's ``}}`` stays ``}}``)."""
    parts: list[str | _Field] = []
    literal: list[str] = []
    escaped: list[bool] = []  # the open braces: doubled ({{) or not
    i = 0
    while (brace := _BRACE.search(text, i)) is not None:
        at = brace.start()
        literal.append(text[i:at])
        field = _FIELD.match(text, at)
        if text.startswith("{{", at):
            literal.append("{")
            escaped.append(True)
            i = at + 2
        elif field is not None:
            parts.append("".join(literal))
            literal = []
            parts.append(_Field(field))
            i = field.end()
        elif text[at] == "{":
            literal.append("{")
            escaped.append(False)
            i = at + 1
        else:
            doubled = text.startswith("}}", at) and (not escaped or escaped[-1])
            literal.append("}")
            if escaped:
                escaped.pop()
            i = at + (2 if doubled else 1)
    literal.append(text[i:])
    parts.append("".join(literal))
    return tuple(part for part in parts if part != "")


_BRACE = re.compile(r"[{}]")


def _fill(text: str, task: Mapping[str, Any]) -> str:
    """``text`` with the task's fields filled; a field that does not fill stays as written."""
    out = []
    for part in _prompt_parts(text):
        if isinstance(part, str):
            out.append(part)
            continue
        try:
            out.append(part.fill(task))
        except _FILL_ERRORS:
            out.append(part.source)
    return "".join(out)
