"""Scripted assistant turns made from a task row: the packaged solutions that the warm start
plays (``trainer.warm_start.responses``) and the gold answers of ``agentfly recipes check``
(``check.gold``).

A step is a response template of the row's fields (``"ANSWER: {answer}"``; ``{{`` and ``}}``
are literal braces) or a :class:`~agentfly_cli.settings.train.SolutionStep`, which plays a list
field of the row item by item. :func:`play` keeps what filled each turn, so that a check can
fill the same template with other values (an empty or a wrong answer in the gold's format).
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.settings.train import SolutionStep

WARM_START = ("trainer.warm_start.responses", "train without the warm start (--no-warm-start)")


@dataclass
class Said:
    """One scripted turn: its text, and the template and fields that made it (none when the
    text came as it is, e.g. from a function)."""

    text: str
    template: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)

    def refilled(self, values: Mapping[str, Any]) -> str | None:
        """The turn with ``values`` in place of its fields' (the others kept); None when the
        template cannot take them (``{hops[0]}`` of an empty value)."""
        if self.template is None:
            return self.text
        try:
            return self.template.format_map({**self.fields, **values})
        except (IndexError, KeyError, TypeError, ValueError, AttributeError):
            return None


def template_fields(template: str) -> list[str]:
    """The fields a template reads, in order, once each (``{answer}`` and ``{hops[0]}`` read
    ``answer`` and ``hops``)."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:  # a lone { or }
        raise UserError(
            f"template {template!r} is not a format string ({exc}); write {{field}} for a "
            "field and {{ or }} for a literal brace"
        ) from None
    names = [re.split(r"[.\[]", name, maxsplit=1)[0] for _, name, _, _ in parsed if name]
    return list(dict.fromkeys(names))


def fill(template: str, fields: Mapping[str, Any], where: str, names=WARM_START) -> str:
    """``template`` filled from ``fields``; a field the row lacks is one UserError line naming
    the setting (``names``: the setting and the other fix)."""
    setting, fix = names
    missing = sorted(set(template_fields(template)) - set(fields))
    if missing:
        raise UserError(
            f"{setting}: {where} has no field {missing[0]!r} for {template!r}; name a field the "
            f"data rows have, or {fix}"
        )
    try:
        return template.format_map(dict(fields))
    except (ValueError, IndexError, KeyError, AttributeError) as exc:  # {answer:>x}, {a.b}, {0}
        raise UserError(
            f"{setting}: {template!r} cannot be filled for {where} ({exc}); use plain "
            "{field} names"
        ) from None


def play(
    row: Mapping[str, Any], steps: Sequence[str | SolutionStep], names=WARM_START
) -> list[Said]:
    """The assistant turns that play ``row``'s steps, each with what filled it."""
    where = f"task {row.get('id', '?')}"
    setting, fix = names
    turns: list[Said] = []
    for step in steps:
        if isinstance(step, str):
            turns.append(Said(fill(step, row, where, names), step, dict(row)))
            continue
        items = row.get(step.each)
        if not isinstance(items, list):
            raise UserError(
                f"{setting}: {where} has no list field {step.each!r}; name the field that "
                f"holds the solution's steps, or {fix}"
            )
        taken = items[:: step.every]
        for index, item in enumerate(taken):
            fields = {"item": item, **(dict(item) if isinstance(item, Mapping) else {})}
            said = step.last if step.last is not None and index == len(taken) - 1 else step.say
            for template in [said] if isinstance(said, str) else said:
                turns.append(Said(fill(template, fields, where, names), template, fields))
    return turns


def solution_responses(
    row: Mapping[str, Any], steps: Sequence[str | SolutionStep], names=WARM_START
) -> list[str]:
    """The assistant turns that play ``row``'s packaged solution."""
    return [said.text for said in play(row, steps, names)]
