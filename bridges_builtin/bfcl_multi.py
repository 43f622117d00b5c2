"""BFCL's multi-turn entries as task rows, and the replies that solve them.

An entry's first user turn is the row's opening ``messages``; its later turns are
``user_turns`` delivered after each answer (BFCL moves to the next user turn when the model
replies without a call). Its ``tools`` are BFCL's function docs for the involved classes, and
its ``bfcl`` field keeps what the ``bfcl_api`` env and the ``bfcl_multi_turn`` checker need:
the classes, the ``initial_config``, whether it is long-context, and the ground-truth calls per
user turn. BFCL's multi-turn function names have no dots, so the model sees them as they are.
"""

from __future__ import annotations

from typing import Any

from agentfly_cli.errors import UserError
from bridges_builtin.bfcl_api import keyword_arguments
from bridges_builtin.bfcl_data import VERSION, _read_lines, data_folder, pythonic_calls

#: the multi-turn categories built
MULTI_TURN_CATEGORIES = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
NOT_BUILT: dict[str, str] = {}  # a category not built, and why
ANSWER = "Done."  # the reply without a call that hands the floor to the next user turn


def _tool(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": doc["name"],
            "description": doc.get("description", ""),
            "parameters": doc.get("parameters", {"type": "dict", "properties": {}}),
        },
    }


def class_tools(classes: list[str]) -> list[dict[str, Any]]:
    """BFCL's function docs of ``classes`` as tool schemas (a later class's same name wins,
    as BFCL's executor resolves it)."""
    from bridges_builtin.bfcl_api import backend_config

    files = backend_config().MULTI_TURN_FUNC_DOC_FILE_MAPPING
    by_name: dict[str, dict[str, Any]] = {}
    for name in classes:
        for doc in _read_lines(data_folder() / "multi_turn_func_doc" / files[name]):
            by_name.pop(doc["name"], None)
            by_name[doc["name"]] = _tool(doc)
    return list(by_name.values())


def _content(turn: list[dict[str, Any]]) -> str:
    return "\n\n".join(str(m.get("content", "")) for m in turn)


def _held_out_turn(tools: list[dict[str, Any]], names: list[str]) -> str:
    """The user turn that brings held-out functions, as BFCL's prompting mode writes it: the
    function docs, then "I have updated some more functions ..."."""
    from bfcl_eval.constants.default_prompts import (
        DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING as PROMPT,
    )

    docs = [_doc(t) for t in tools if t["function"]["name"] in names]
    return PROMPT.format(functions=docs)


def _doc(tool: dict[str, Any]) -> dict[str, Any]:
    return {k: tool["function"][k] for k in ("name", "description", "parameters")}


def entry_row(entry: dict[str, Any], truth: list[list[str]], category: str) -> dict[str, Any]:
    """One multi-turn entry (and its ground truth) as a task row. For miss_func, the held-out
    functions are among the row's tools but ``unlisted_tools`` (not rendered) until the turn
    whose user message describes them, as BFCL's prompting mode adds them."""
    turns = entry["question"]
    tools = class_tools(entry["involved_classes"])
    held_out = {int(k): list(v) for k, v in (entry.get("missed_function") or {}).items()}
    later = [
        _held_out_turn(tools, held_out[i]) if i in held_out else _content(t)
        for i, t in enumerate(turns)
    ][1:]
    extra: dict[str, Any] = {}
    if held_out:
        extra["unlisted_tools"] = sorted({n for names in held_out.values() for n in names})
    return {
        "id": entry["id"],
        "category": category,
        "messages": list(turns[0]),
        "user_turns": [{"content": text, "after": "answer"} for text in later],
        "tools": tools,
        **extra,
        "bfcl": {
            "category": category,
            "involved_classes": list(entry["involved_classes"]),
            "initial_config": entry.get("initial_config") or {},
            "long_context": "long_context" in category,
            "ground_truth": truth,
        },
    }


def multi_turn_rows(category: str) -> list[dict[str, Any]]:
    """Every entry of a multi-turn category as a task row, in BFCL's order."""
    if category in NOT_BUILT:
        raise UserError(f"bfcl category {category!r} is not built: {NOT_BUILT[category]}; "
                        "pick one of: " + ", ".join(MULTI_TURN_CATEGORIES))  # fmt: skip
    folder = data_folder()
    entries = _read_lines(folder / f"{VERSION}_{category}.json")
    answers = {
        row["id"]: row["ground_truth"]
        for row in _read_lines(folder / "possible_answer" / f"{VERSION}_{category}.json")
    }
    return [entry_row(e, answers[e["id"]], category) for e in entries if e["id"] in answers]


def gold_multi_turn(task: dict[str, Any]) -> list[str]:
    """Replies that replay the ground truth: each turn's calls one per reply (BFCL's order),
    then an answer that hands the floor to the next user turn."""
    classes = task["bfcl"]["involved_classes"]
    replies = []
    for turn in task["bfcl"]["ground_truth"]:
        for text in turn:
            name, arguments = keyword_arguments(classes, text)
            replies.append(pythonic_calls([{"name": name, "arguments": arguments}]))
        replies.append(ANSWER)
    return replies
