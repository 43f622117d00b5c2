"""Derive a tool's JSON schema and argument validator from its signature and docstring.

Type hints become JSON Schema through pydantic (str, int, float, bool, Optional, unions,
``list[T]``, dict, Literal, Enum, pydantic models, ``Annotated[..., Field(...)]``). The
docstring (Google, NumPy, reST or Epydoc style, via ``docstring_parser``) gives the tool's
description and each argument's description. ``from __future__ import annotations`` works:
string annotations are resolved with :func:`typing.get_type_hints`.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import docstring_parser
import pydantic


class ToolDefinitionError(TypeError):
    """A function that cannot be turned into a tool (raised at decoration time)."""


@dataclass(frozen=True)
class ArgumentsSpec:
    """What a function takes: a validating pydantic model and its cleaned JSON schema."""

    model: type[pydantic.BaseModel]
    parameters: dict[str, Any]
    description: str
    field_to_argument: dict[str, str]

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The call's keyword arguments; raises :class:`pydantic.ValidationError`."""
        validated = self.model.model_validate(arguments)
        return {self.field_to_argument[name]: value for name, value in validated.__dict__.items()}


def describe_function(
    func: Callable[..., Any], *, skip: Iterable[str] = (), label: str | None = None
) -> ArgumentsSpec:
    """Build the :class:`ArgumentsSpec` of ``func``, leaving out the parameters in ``skip``."""
    label = label or getattr(func, "__name__", repr(func))
    skip = set(skip)
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"tool '{label}': cannot read its signature ({exc})") from exc
    try:
        hints = typing.get_type_hints(func, include_extras=True)
    except Exception as exc:  # NameError for unresolvable forward references, and friends
        raise ToolDefinitionError(
            f"tool '{label}': cannot resolve its type hints ({type(exc).__name__}: {exc}); "
            "define the types at module level so they can be imported"
        ) from exc
    docstring = docstring_parser.parse(inspect.getdoc(func) or "")
    argument_docs = {p.arg_name: unwrap_text(p.description or "") for p in docstring.params}

    fields: dict[str, Any] = {}
    field_to_argument: dict[str, str] = {}
    for index, (name, parameter) in enumerate(signature.parameters.items()):
        if name in skip:
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"tool '{label}': *{name} cannot be described to a model; "
                "declare each argument by name"
            )
        if parameter.kind is parameter.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"tool '{label}': argument '{name}' is positional-only; tools are called "
                "with keyword arguments"
            )
        annotation = hints.get(name, Any)
        default = ... if parameter.default is parameter.empty else parameter.default
        field_name = f"arg{index}"  # aliases keep names like 'schema' or '_x' safe in pydantic
        fields[field_name] = (
            annotation,
            pydantic.Field(default, alias=name, description=argument_docs.get(name) or None),
        )
        field_to_argument[field_name] = name
    try:
        model = pydantic.create_model(
            f"{label}_arguments",
            __config__=pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=False),
            **fields,
        )
        raw_schema = model.model_json_schema(by_alias=True)
    except Exception as exc:  # pydantic.PydanticSchemaGenerationError and friends
        raise ToolDefinitionError(
            f"tool '{label}': a parameter type cannot be expressed as JSON Schema ({exc}); "
            "use JSON types, Literal, Enum or pydantic models"
        ) from exc
    cleaned = clean_schema(raw_schema)
    parameters = {"type": "object", "properties": cleaned.pop("properties", {})}
    if "required" in cleaned:
        parameters["required"] = cleaned.pop("required")
    cleaned.pop("additionalProperties", None)
    parameters["additionalProperties"] = False
    parameters.update((k, v) for k, v in cleaned.items() if k != "type")
    description = "\n\n".join(
        unwrap_text(part)
        for part in (docstring.short_description, docstring.long_description)
        if part and part.strip()
    )
    return ArgumentsSpec(model, parameters, description, field_to_argument)


_STRUCTURED_LINE = re.compile(r"^\s*([-*+>|]|\d+[.)]\s|```)|^\s{2,}")


def unwrap_text(text: str) -> str:
    """Join the hard-wrapped lines of each paragraph; lists, quotes and code keep their lines."""
    paragraphs = re.split(r"\n\s*\n", text.strip())
    unwrapped = []
    for paragraph in paragraphs:
        lines = paragraph.splitlines()
        if any(_STRUCTURED_LINE.match(line) for line in lines):
            unwrapped.append(paragraph)
        else:
            unwrapped.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(unwrapped)


def clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's titles and inline ``$defs`` references (recursive models keep them)."""
    definitions = schema.get("$defs", {})
    kept_definitions: dict[str, Any] = {}

    def resolve(node: Any, stack: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [resolve(item, stack) for item in node]
        if not isinstance(node, dict):
            return node
        reference = node.get("$ref")
        if isinstance(reference, str) and reference.startswith("#/$defs/"):
            target = reference.removeprefix("#/$defs/")
            if target in stack:  # recursive model: keep the reference
                kept_definitions[target] = definitions[target]
                return {"$ref": reference}
            inlined = resolve(definitions[target], stack + (target,))
            extra = {k: resolve(v, stack) for k, v in node.items() if k not in ("$ref", "title")}
            return {**inlined, **extra}
        cleaned: dict[str, Any] = {}
        for key, value in node.items():
            if key in ("title", "$defs"):
                continue
            if key == "properties" and isinstance(value, dict):
                cleaned[key] = {name: resolve(sub, stack) for name, sub in value.items()}
            else:
                cleaned[key] = resolve(value, stack)
        return cleaned

    result = resolve(schema, ())
    if kept_definitions:
        result["$defs"] = {
            name: resolve(definition, (name,)) for name, definition in kept_definitions.items()
        }
    return result


def format_validation_error(tool_name: str, error: pydantic.ValidationError) -> str:
    """One line that names every bad argument, in words a model can act on."""
    problems = []
    for item in error.errors(include_url=False):
        location = item.get("loc") or ()
        argument = str(location[0]) if location else "?"
        path = argument + "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in location[1:]
        )
        kind = item.get("type")
        if kind == "missing":
            problems.append(f"missing required argument '{path}'")
        elif kind == "extra_forbidden":
            problems.append(f"unknown argument '{path}'")
        else:
            value = repr(item.get("input"))
            if len(value) > 60:
                value = value[:57] + "..."
            problems.append(f"argument '{path}': {item.get('msg', 'invalid value')} (got {value})")
    return f"invalid arguments for tool '{tool_name}': " + "; ".join(problems)


class JsonSchemaArguments:
    """The arguments of a tool described by a JSON Schema (an MCP server's tool, say).

    Arguments are checked with ``jsonschema``; errors come out as the same
    :class:`pydantic.ValidationError` lines as a function tool's. Unknown arguments are refused
    unless the schema allows them, and numbers or booleans sent as strings (``"3"``, ``"true"``)
    are converted, as pydantic does for function tools.
    """

    def __init__(
        self, schema: dict[str, Any], *, label: str, description: str = "", check: bool = True
    ) -> None:
        """``check``: check ``schema`` against its metaschema (about 9 ms for draft 2020-12);
        False for schemas the caller checked already (a task row's tools)."""
        from jsonschema import Draft202012Validator, validators
        from jsonschema.exceptions import SchemaError

        if not isinstance(schema, dict) or schema.get("type", "object") != "object":
            raise ToolDefinitionError(f"tool '{label}': its input schema is not an object schema")
        parameters = clean_schema(schema)
        parameters["type"] = "object"
        if "properties" in parameters:  # a schema that lists its arguments takes no others
            parameters.setdefault("additionalProperties", False)
        parameters.setdefault("properties", {})
        cls = validators.validator_for(parameters, default=Draft202012Validator)
        try:
            if check:
                cls.check_schema(parameters)
        except SchemaError as exc:
            raise ToolDefinitionError(
                f"tool '{label}': its input schema is not valid JSON Schema ({exc.message})"
            ) from None
        self.label = label
        self.parameters = parameters
        self.description = description
        self._validator = cls(parameters)

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The arguments, checked and converted; raises :class:`pydantic.ValidationError`."""
        from pydantic_core import PydanticCustomError

        arguments = self._convert(dict(arguments))
        properties = self.parameters["properties"]
        problems: list[Any] = []
        for error in self._validator.iter_errors(arguments):
            path = tuple(error.absolute_path)
            if not path and error.validator == "required":
                missing = [n for n in error.validator_value if n not in arguments]
                problems += [{"type": "missing", "loc": (n,), "input": arguments} for n in missing]
            elif not path and error.validator == "additionalProperties":
                extra = [n for n in arguments if n not in properties]
                problems += [
                    {"type": "extra_forbidden", "loc": (n,), "input": arguments[n]} for n in extra
                ]
            else:
                message = PydanticCustomError(
                    "json_schema", "{message}", {"message": error.message}
                )
                problems.append(
                    {"type": message, "loc": path or ("(arguments)",), "input": error.instance}
                )
        if problems:
            raise pydantic.ValidationError.from_exception_data(self.label, problems)
        return arguments

    def _convert(self, arguments: dict[str, Any]) -> dict[str, Any]:
        for name, value in arguments.items():
            kind = self.parameters["properties"].get(name, {}).get("type")
            if not isinstance(value, str) or kind not in ("integer", "number", "boolean"):
                continue
            text = value.strip()
            if kind == "boolean" and text.lower() in ("true", "false"):
                arguments[name] = text.lower() == "true"
            elif kind == "integer" and re.fullmatch(r"[-+]?\d+", text):
                arguments[name] = int(text)
            elif kind == "number" and re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text):
                arguments[name] = float(text) if any(c in text for c in ".eE") else int(text)
        return arguments
