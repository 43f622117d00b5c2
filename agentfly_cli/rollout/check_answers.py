"""The answers ``agentfly recipes check`` plays for each task: its gold answer (``check.gold``)
and the junk answers the gold one must beat.

The built-in junk, for a task row: ``empty`` (an empty reply), ``dont_know`` ("I don't know"),
``blank_answer`` (the gold turns with the last one's fields emptied: an empty answer in the
gold's format), ``wrong_answer`` (the gold turns with the last one's values changed: the
first number in each raised by one, or, where they hold no number, the next task's values), and
``other_task`` (the gold of the next task whose last turn differs, whole: a task with the same
answer is skipped, its gold would be right here too). A kind that cannot be derived for a task (no
field in the last turn, a single task) is left out for it. ``check.junk`` adds templates of its
own, named ``junk[0]``, ``junk[1]``, ...
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.rollout.solutions import Said, fill, play, template_fields
from agentfly_cli.settings.train import SolutionStep

NAMES = ("check.gold", "pass --gold TEMPLATE")
JUNK_NAMES = ("check.junk", "drop that junk template")
BUILTIN_JUNK = ("empty", "dont_know", "blank_answer", "wrong_answer", "other_task")
#: ``module:fn`` or ``path/file.py:fn``: a gold function, not a template (no space, no brace)
FUNCTION_REF = re.compile(r"^(?:[A-Za-z_][\w.]*|[^\s{}]+\.py):[A-Za-z_]\w*$")
NUMBER = re.compile(r"\d+")


@dataclass
class Answers:
    """One task's answers: the gold turns, and each junk answer's turns by name."""

    gold: list[str]
    junk: dict[str, list[str]]


def is_function_ref(text: str) -> bool:
    """Whether a ``check.gold`` string names a function (``module:fn``, ``file.py:fn``)."""
    return FUNCTION_REF.match(text) is not None


class GoldSource:
    """How a task's gold turns are made: templates and list steps, or a function."""

    def __init__(self, gold: Any) -> None:
        if gold is None or gold == [] or gold == "":
            raise UserError(
                "check.gold: this recipe gives no gold answer; add a check: {gold: 'ANSWER: "
                "{answer}'} section to it or pass --gold TEMPLATE"
            )
        self.function: Callable[[dict], Any] | None = None
        self.steps: list[Any] = []
        if isinstance(gold, str) and is_function_ref(gold):
            from agentfly_cli.plugin_host.loading import load_object

            function = load_object(gold)
            if not callable(function):
                raise UserError(
                    f"check.gold {gold!r} is not a function; give module:fn or file.py:fn "
                    "with fn(task) -> a list of the assistant's responses"
                )
            self.function, self.name = function, gold
        else:
            self.steps = [_step(s) for s in ([gold] if isinstance(gold, str) else list(gold))]
            self.name = None

    def turns(self, row: Mapping[str, Any]) -> list[Said]:
        """``row``'s gold turns."""
        if self.function is None:
            return play(row, self.steps, NAMES)
        where = f"task {row.get('id', '?')}"
        try:
            said = self.function(dict(row))
        except Exception as exc:  # the user's function: one line, naming it
            raise UserError(
                f"check.gold {self.name} raised {type(exc).__name__}: {exc} for {where}; fix "
                "the function"
            ) from None
        if isinstance(said, str):
            said = [said]
        if not isinstance(said, (list, tuple)) or not all(isinstance(s, str) for s in said):
            raise UserError(
                f"check.gold {self.name} returned {type(said).__name__} for {where}; return a "
                "list of the assistant's responses (strings)"
            )
        return [Said(text) for text in said]


def _step(step: Any) -> str | SolutionStep:
    """A gold step: a template, or a list step (a dict, e.g. from the Python API, checked)."""
    if isinstance(step, (str, SolutionStep)):
        return step
    if isinstance(step, Mapping):
        from pydantic import ValidationError

        try:
            return SolutionStep(**step)
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"]) or "step"
            raise UserError(
                f"check.gold: the list step {dict(step)!r} is not valid ({where}: "
                f"{problem['msg']}); give {{each: FIELD, say: TEMPLATE}}"
            ) from None
    raise UserError(
        f"check.gold: {step!r} is neither a template nor a list step; give a template such "
        "as 'ANSWER: {answer}' or {each: FIELD, say: TEMPLATE}"
    )


def task_answers(
    rows: Sequence[Mapping[str, Any]],
    gold: GoldSource,
    junk: Sequence[str | Sequence[str]] = (),
    skip: Sequence[str] = (),
) -> list[Answers]:
    """Each row's gold and junk answers (the next row is row ``i + 1``, wrapping round);
    ``skip``: built-in junk kinds left out (``check.skip_junk``)."""
    golds = [gold.turns(row) for row in rows]
    out = []
    for index, row in enumerate(rows):
        turns = golds[index]
        texts = [said.text for said in turns]
        others = [rows[(index + k) % len(rows)] for k in range(1, len(rows))]
        other_golds = [golds[(index + k) % len(rows)] for k in range(1, len(rows))]
        kinds: dict[str, list[str]] = {"empty": [""], "dont_know": ["I don't know"]}
        if turns:
            last = turns[-1]
            blank = _blank(last)
            if blank is not None and blank != last.text:
                kinds["blank_answer"] = [*texts[:-1], blank]
            wrong = _wrong(last, others)
            if wrong is not None:
                kinds["wrong_answer"] = [*texts[:-1], wrong]
        other = next((g for g in other_golds if g and turns and g[-1].text != turns[-1].text),
                     None)  # fmt: skip
        if other is not None:  # another task's gold whose last turn (its answer) differs
            kinds["other_task"] = [said.text for said in other]
        for number, templates in enumerate(junk):
            templates = [templates] if isinstance(templates, str) else list(templates)
            where = f"task {row.get('id', '?')}"
            kinds[f"junk[{number}]"] = [fill(t, row, where, JUNK_NAMES) for t in templates]
        kept = {name: said for name, said in kinds.items() if said != texts and name not in skip}
        out.append(Answers(texts, kept))
    return out


def _blank(last: Said) -> str | None:
    """The last gold turn with its fields emptied (None when it has none)."""
    if last.template is None:
        return None
    names = template_fields(last.template)
    if not names:
        return None
    return last.refilled({name: "" for name in names})


def _wrong(last: Said, others: Sequence[Mapping[str, Any]]) -> str | None:
    """The last gold turn with wrong values: the first number of each of its fields (of its
    text, for a function's turns) raised by one; where they hold none, the first other row's
    values that differ. None when neither can be made."""
    if last.template is None:
        changed = _bump_numbers(last.text)
        return changed if changed != last.text else None
    names = template_fields(last.template)
    if not names:
        return None
    bumped = {name: _bump_numbers(str(last.fields.get(name, ""))) for name in names}
    if any(bumped[name] != str(last.fields.get(name, "")) for name in names):
        text = last.refilled(bumped)
        if text is not None and text != last.text:
            return text
    for other in others:
        if all(name in other for name in names):
            text = last.refilled({name: other[name] for name in names})
            if text is not None and text != last.text:
                return text
    return None


def _bump_numbers(text: str) -> str:
    """``text`` with its first run of digits raised by one: "103" -> "104", "12.75" ->
    "13.75", "7/12" -> "8/12", "-5" -> "-6" (always another value)."""
    return NUMBER.sub(lambda match: str(int(match.group()) + 1), text, count=1)
