"""``reasoning_gym_score``: the generator's own ``score_answer(answer, entry)``.

The answer is what follows ``ANSWER:`` in the model's last reply: the rest of that line, or,
for a generator whose answers span lines (a matrix, a board), the rest of the reply. A reply
without an ``ANSWER:`` line scores 0. The entry is the one the library generated for the row,
generated again from the row's ``rg`` spec (JSON would turn its tuples into lists, which some
scorers compare); a row without one (a file of your own), or one whose generator does not make
the same question again (codeio, list_functions), is scored as it stands.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agentfly_cli.components.rewards import reward
from bridges_builtin import rg_tasks
from bridges_builtin.replies import last_reply

ANSWER = re.compile(r"^[ \t]*ANSWER:[ \t]*", re.MULTILINE)


def answer_in(text: str, multiline: bool) -> str | None:
    """What follows the first ``ANSWER:`` line start of ``text`` (None: no such line)."""
    found = ANSWER.search(text)
    if found is None:
        return None
    rest = text[found.end() :]
    return (rest if multiline else rest.split("\n", 1)[0]).strip()


@reward
def reasoning_gym_score(
    prediction: Any,
    trajectory: Any = None,
    source: str = "",
    question: str = "",
    answer: Any = None,
    metadata: Any = None,
    rg: Any = None,
) -> dict:
    """reasoning-gym's own scorer of the task's generator (score_answer) on the ANSWER: line."""
    spec = rg if isinstance(rg, Mapping) else {}
    name = spec.get("source") or source
    if not name:
        raise LookupError("reward 'reasoning_gym_score' needs the row's 'source' (the generator)")
    reply = last_reply(trajectory)
    given = prediction if reply is None else answer_in(reply, bool(spec.get("multiline")))
    if given is None:
        return {"reward": 0.0, "reason": "no ANSWER: line"}
    entry = {"question": question, "answer": answer, "metadata": metadata or {}}
    if spec:
        scorer = _scorer(spec)
        rebuilt = rg_tasks.rebuilt_entry(spec)
        if not question or rebuilt["question"] == question:  # else a generator that is not
            entry = rebuilt  # deterministic (codeio): the row as it stands
    else:
        scorer = rg_tasks.dataset(name, None, 0, 1, {})
    try:
        score = float(scorer.score_answer(str(given), entry))
    except Exception as exc:  # a scorer that cannot read this answer: the answer is wrong
        return {"reward": 0.0, "answer": str(given), "reason": f"the scorer raised {exc!r:.200}"}
    return {"reward": min(1.0, max(0.0, score)), "answer": str(given)}


def _scorer(spec: Mapping[str, Any]) -> Any:
    """The dataset that generated the row (its scorer may read its settings)."""
    return rg_tasks.dataset(
        spec["source"], spec.get("curriculum_level"), spec["seed"], spec["size"],
        spec.get("config") or {},
    )  # fmt: skip
