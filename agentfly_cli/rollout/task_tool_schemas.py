"""The tool schemas a task row brings (``data.tools_field``), read into OpenAI form.

A row's field holds a list of OpenAI tool schemas, ``{"type": "function", "function": {name,
description, parameters}}``, or their bare function objects, as BFCL writes them (a JSON string
of that list works too, as some datasets store it). BFCL's parameter types that JSON Schema
lacks are read as their JSON Schema type: ``dict`` is ``object``, ``float`` ``number``,
``tuple`` ``array``, ``any`` no type at all (and so on for the Java and JavaScript names, e.g.
``String``, ``long``, ``HashMap``). A schema that cannot be read is a
:class:`TaskToolError` naming where it is wrong and the fix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentfly_cli.errors import UserError

JSON_TYPES = ("string", "number", "integer", "boolean", "array", "object", "null")
# BFCL's (and its Java and JavaScript categories') type names, lower-cased -> JSON Schema
TYPE_ALIASES = {
    "dict": "object", "map": "object", "hashmap": "object", "hashtable": "object",
    "float": "number", "double": "number",
    "int": "integer", "long": "integer", "short": "integer", "byte": "integer",
    "bigint": "integer",
    "bool": "boolean", "str": "string", "char": "string",
    "tuple": "array", "list": "array", "arraylist": "array", "queue": "array",
    "stack": "array", "set": "array",
}  # fmt: skip
ANY_TYPES = ("any",)  # no constraint: the key is dropped
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # OpenAI's names, and BFCL's dotted ones
_SCHEMA_KEYS = ("properties", "$defs", "definitions", "patternProperties")  # name -> schema
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")  # lists of schemas
_SCHEMA_VALUES = (
    "items",
    "additionalProperties",
    "additionalItems",
    "not",
    "contains",
    "propertyNames",
    "if",
    "then",
    "else",
)  # one schema each


class TaskToolError(ValueError):
    """A row's tool schema that cannot be read: what is wrong and the fix; ``at`` says which
    tool (``[2] ('get_weather')``), empty for the field as a whole."""

    def __init__(self, problem: str, at: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.at = at


def field_tools(value: Any) -> list[Any]:
    """The list of schemas in a row's tools field (``None``, ``""`` and ``[]``: none)."""
    if value is None:
        return []
    if isinstance(value, str):
        if not value.strip():
            return []
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise TaskToolError(
                f"is a string but not JSON ({exc.msg} at position {exc.pos}); give a list of "
                "tool schemas"
            ) from None
    if isinstance(value, Mapping):
        raise TaskToolError("is one object; give a list of tool schemas, e.g. [{...}]")
    if not isinstance(value, (list, tuple)):
        raise TaskToolError(
            f"is not a list (got {type(value).__name__}); give a list of tool schemas"
        )
    return list(value)


def normalize_tools(value: Any) -> list[dict[str, Any]]:
    """A row's tools field as OpenAI schemas with JSON Schema parameters (a new list)."""
    tools, names = [], set()
    for i, raw in enumerate(field_tools(value)):
        try:
            tool = normalize_tool(raw)
        except TaskToolError as exc:
            raise TaskToolError(exc.problem, f"[{i}]{_named(raw)}") from None
        name = tool["function"]["name"]
        if name in names:
            raise TaskToolError(
                "is named a second time; give each tool its own name", f"[{i}] ('{name}')"
            )
        names.add(name)
        tools.append(tool)
    return tools


def normalize_tool(raw: Any) -> dict[str, Any]:
    """One schema (wrapped or bare) as ``{"type": "function", "function": {...}}``."""
    if not isinstance(raw, Mapping):
        raise TaskToolError(f"is not a tool schema object (got {type(raw).__name__})")
    function = raw.get("function") if "function" in raw else raw
    if raw.get("type", "function") != "function" or not isinstance(function, Mapping):
        raise TaskToolError(
            'is not a function tool; write {"type": "function", "function": {"name": ..., '
            '"parameters": {...}}} or the bare {"name": ..., "parameters": {...}}'
        )
    name = function.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise TaskToolError(
            f"has the name {name!r}; give a name of 1-64 letters, digits, '_', '.' or '-'"
        )
    out: dict[str, Any] = {"name": name}
    description = function.get("description")
    if description is not None:
        if not isinstance(description, str):
            raise TaskToolError("has a description that is not a string; write it as text")
        out["description"] = description
    out["parameters"] = _parameters(function.get("parameters"))
    return {"type": "function", "function": out}


def _parameters(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {"type": "object", "properties": {}}
    if not isinstance(raw, Mapping):
        raise TaskToolError("has parameters that are not an object schema; write {...}")
    parameters = _schema(raw, "parameters")
    if "type" not in parameters and "properties" in parameters:
        parameters["type"] = "object"
    if parameters.get("type") != "object":
        raise TaskToolError(
            f"has parameters of type {parameters.get('type')!r}; the parameters are an object "
            'schema, {"type": "object", "properties": {...}}'
        )
    return parameters


def _schema(node: Any, path: str) -> Any:
    """A copy of ``node`` with BFCL's types read as JSON Schema's (and draft-4 tuple ``items``
    as ``prefixItems``), recursively; a keyword whose value JSON Schema refuses is a
    :class:`TaskToolError` (a check as strict as the metaschema's on what tool schemas use,
    at a small share of its cost)."""
    if isinstance(node, bool):
        return node
    if not isinstance(node, Mapping):
        raise TaskToolError(f"has {path} {_short(node)}, which is not a schema; write {{...}}")
    node = dict(node)  # a new node: the row keeps what it holds
    if "type" in node:
        kinds = node["type"]
        many = isinstance(kinds, list)
        mapped = [_json_type(kind, f"{path}.type") for kind in (kinds if many else [kinds])]
        mapped = [kind for kind in mapped if kind is not None]
        if not mapped or (not many and len(mapped) != 1):
            del node["type"]  # "any": every value
        else:
            node["type"] = list(dict.fromkeys(mapped)) if many else mapped[0]
    if isinstance(node.get("items"), list):  # draft 4's tuple form
        node["prefixItems"] = node.pop("items")
        if "additionalItems" in node:
            node["items"] = node.pop("additionalItems")
    for key, value in node.items():
        where = f"{path}.{key}"
        if key in _SCHEMA_KEYS:
            _expect(isinstance(value, dict), where, value, "an object of schemas")
            node[key] = {n: _schema(sub, f"{where}.{n}") for n, sub in value.items()}
        elif key in _SCHEMA_LISTS:
            _expect(isinstance(value, list) and value, where, value, "a list of schemas")
            node[key] = [_schema(sub, f"{where}[{i}]") for i, sub in enumerate(value)]
        elif key in _SCHEMA_VALUES:
            node[key] = _schema(value, where)
        else:
            _check_keyword(key, value, where)
    return node


_NUMBERS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")
_TEXTS = ("description", "title", "format", "pattern", "$ref", "$id", "$schema", "$comment")


def _check_keyword(key: str, value: Any, where: str) -> None:
    if key == "required":
        fine = isinstance(value, list) and all(isinstance(v, str) for v in value)
        _expect(fine, where, value, "a list of argument names")
    elif key == "enum":
        _expect(isinstance(value, list), where, value, "a list of values")
    elif key in _NUMBERS:
        _expect(_is_number(value), where, value, "a number")
    elif key in _COUNTS:
        _expect(_is_number(value) and value == int(value) and value >= 0, where, value,
                "a count (0, 1, 2, ...)")  # fmt: skip
    elif key in _TEXTS:
        _expect(isinstance(value, str), where, value, "text")
        if key == "pattern":
            try:
                re.compile(value)
            except re.error as exc:
                raise TaskToolError(f"has {where} {_short(value)}, not a pattern ({exc})") from None
    elif key == "uniqueItems":
        _expect(isinstance(value, bool), where, value, "true or false")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _expect(fine: Any, where: str, value: Any, expected: str) -> None:
    if not fine:
        raise TaskToolError(f"has {where} {_short(value)}, which is not {expected}; fix the schema")


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _json_type(kind: Any, path: str) -> str | None:
    if not isinstance(kind, str):
        raise TaskToolError(f"has {path} {kind!r}; a type is a name such as string")
    if kind in JSON_TYPES:
        return kind
    lowered = kind.lower()
    if lowered in ANY_TYPES:
        return None
    mapped = lowered if lowered in JSON_TYPES else TYPE_ALIASES.get(lowered)
    if mapped is None:
        raise TaskToolError(
            f"has {path} {kind!r}, which is not a JSON Schema type; use one of "
            f"{', '.join(JSON_TYPES)} (BFCL's dict, float, tuple and any are read too)"
        )
    return mapped


def _named(raw: Any) -> str:
    function = raw.get("function", raw) if isinstance(raw, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    return f" ('{name}')" if isinstance(name, str) and name else ""


def check_task_tools(
    rows: Sequence[Any], source: str, field: str | None, run_tools: Iterable[str]
) -> None:
    """Raise a UserError for the first row whose tools cannot be read, or that names one of the
    run's tools (``source`` row N, 1-based)."""
    if not field:
        return
    run = set(run_tools)
    for number, row in enumerate(rows, 1):
        if not isinstance(row, Mapping) or row.get(field) is None:
            continue
        row_tool_schemas(row, field, run, f"{source} row {number}")


def row_tool_schemas(
    row: Mapping[str, Any], field: str, run_tools: set[str], where: str
) -> list[dict[str, Any]]:
    """The row's tools, read; a UserError naming ``where`` when they cannot be."""
    try:
        tools = normalize_tools(row.get(field))
    except TaskToolError as exc:
        raise UserError(f"{where}: {field}{exc.at} {exc.problem}") from None
    for i, tool in enumerate(tools):
        name = tool["function"]["name"]
        if name in run_tools:
            raise UserError(
                f"{where}: {field}[{i}] '{name}' has the name of the run's tool '{name}' "
                f"(tools: {', '.join(sorted(run_tools))}); rename the row's tool or drop "
                f"'{name}' from the run's tools"
            )
    return tools
