"""BFCL's function-calling entries (bfcl-eval, read offline from its wheel) as task rows.

A single-turn entry becomes a row whose opening conversation is the entry's question, whose
``tools`` are the entry's functions (its own tools: declaration-only, so a call ends the
episode and is then checked), and whose ``bfcl`` field keeps what BFCL's AST checker needs:
the functions as BFCL wrote them, the possible answers, the language and the category.
Function names with dots (``math.factorial``) are not valid tool names for most chat
templates and APIs; as BFCL itself does for OpenAI models, the model sees them with
underscores, and the checker maps them back (``bfcl.names``).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError

INSTALL = "pip install --no-deps bfcl-eval==2026.3.23"
VERSION = "BFCL_v4"
#: the single-turn categories BFCL's AST checker scores, and their language
AST_CATEGORIES = {
    "simple_python": "python",
    "simple_java": "java",
    "simple_javascript": "javascript",
    "multiple": "python",
    "parallel": "python",
    "parallel_multiple": "python",
    "live_simple": "python",
    "live_multiple": "python",
    "live_parallel": "python",
    "live_parallel_multiple": "python",
    "irrelevance": "python",
    "live_irrelevance": "python",
    "live_relevance": "python",
}
#: categories whose right answer is to call no function (no possible-answer file)
NO_CALL_CATEGORIES = ("irrelevance", "live_irrelevance")
#: categories whose right answer is any call (relevance: BFCL checks only that one was made)
ANY_CALL_CATEGORIES = ("live_relevance",)


def data_folder() -> Path:
    """bfcl-eval's ``data`` folder, found without importing the package (its ``__init__`` is
    light, but its checkers import every vendor SDK); one UserError line when absent."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"the bfcl bridge needs bfcl-eval (without its dependencies): {INSTALL}")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def _read_lines(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def tool_name(name: str) -> str:
    """The name the model sees: BFCL's dots as underscores (``^[a-zA-Z0-9_-]+$``)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", name)


def entry_row(entry: dict[str, Any], answer: Any, category: str) -> dict[str, Any]:
    """One BFCL entry (and its possible answer) as a task row."""
    functions = entry["function"]
    names = {tool_name(f["name"]): f["name"] for f in functions}
    tools = [
        {
            "type": "function",
            "function": {
                "name": tool_name(f["name"]),
                "description": f.get("description", ""),
                "parameters": f.get("parameters", {"type": "dict", "properties": {}}),
            },
        }
        for f in functions
    ]
    return {
        "id": entry["id"],
        "category": category,
        "messages": list(entry["question"][0]),
        "tools": tools,
        "bfcl": {
            "category": category,
            "language": AST_CATEGORIES[category],
            "functions": functions,
            "names": names,
            "ground_truth": answer,
        },
    }


def category_rows(category: str) -> list[dict[str, Any]]:
    """Every entry of a single-turn BFCL category as a task row, in BFCL's order."""
    if category not in AST_CATEGORIES:
        raise UserError(
            f"bfcl category {category!r} is not a single-turn category; pick one of: "
            + ", ".join(AST_CATEGORIES)
        )
    folder = data_folder()
    entries = _read_lines(folder / f"{VERSION}_{category}.json")
    answer_file = folder / "possible_answer" / f"{VERSION}_{category}.json"
    answers: dict[str, Any] = {}
    if answer_file.is_file():
        answers = {row["id"]: row["ground_truth"] for row in _read_lines(answer_file)}
    rows = []
    for entry in entries:
        if category not in NO_CALL_CATEGORIES + ANY_CALL_CATEGORIES and entry["id"] not in answers:
            continue  # an entry BFCL itself cannot score
        row = entry_row(entry, answers.get(entry["id"]), category)
        row["solution"] = gold_responses(row)[0]  # the warm start's script: "{solution}"
        rows.append(row)
    return rows


def _first_option(value: Any) -> Any:
    """A value built from the first possible answer at every level of BFCL's answer tree:
    ``{"a": [1, 2]}`` -> ``{"a": 1}``; optional (``""``) entries are left out."""
    if isinstance(value, dict):
        return {
            key: _first_option(options[0])
            for key, options in value.items()
            if isinstance(options, list) and options and options[0] != ""
        }
    if isinstance(value, list):
        return [_first_option(item) for item in value]
    return value


def _as_source_text(value: Any) -> str:
    """A Java or JavaScript argument as BFCL expects it: the value's source text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return json.dumps(value)


def gold_calls(row: dict[str, Any]) -> list[dict[str, Any]]:
    """Calls that BFCL's checker accepts for a row: ``[{"name", "arguments"}]`` with the names
    the model sees (none for the categories whose answer is not to call)."""
    bfcl = row["bfcl"]
    truth = bfcl.get("ground_truth") or []
    calls = []
    for call in truth:
        ((name, parameters),) = call.items()
        arguments = _first_option(parameters)
        if bfcl["language"] != "python":
            arguments = {key: _as_source_text(value) for key, value in arguments.items()}
        calls.append({"name": tool_name(name), "arguments": arguments})
    return calls


NO_CALL_REPLY = "None of the functions given can do this."


def _python_literal(value: Any) -> str:
    """A value as Python source (what the pythonic call format writes)."""
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(f"{json.dumps(str(k))}: {_python_literal(v)}" for k, v in value.items())
            + "}"
        )
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_python_literal(v) for v in value) + "]"
    if isinstance(value, bool) or value is None:
        return repr(value)
    return json.dumps(value)


def pythonic_calls(calls: list[dict[str, Any]]) -> str:
    """Calls as the pythonic format's reply: ``[name(a=1, b="x")]``."""
    written = [
        f"{call['name']}("
        + ", ".join(f"{key}={_python_literal(value)}" for key, value in call["arguments"].items())
        + ")"
        for call in calls
    ]
    return "[" + ", ".join(written) + "]"


def gold_responses(task: dict[str, Any]) -> list[str]:
    """The reply BFCL accepts for a row, in the recipe's pythonic call format
    (``agentfly recipes check``'s gold): its possible answer's calls; for the irrelevance
    categories a reply that calls nothing; for live_relevance any call (the first tool's)."""
    category = task["bfcl"]["category"]
    if category in NO_CALL_CATEGORIES:
        return [NO_CALL_REPLY]
    if category in ANY_CALL_CATEGORIES:
        return [pythonic_calls([{"name": task["tools"][0]["function"]["name"], "arguments": {}}])]
    return [pythonic_calls(gold_calls(task))]
