"""Table-driven schema derivation: type hints and docstrings -> OpenAI function schema."""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal, Optional, Union

import pydantic
import pytest

from agentfly_cli import tool
from agentfly_cli.components.tools import ToolDefinitionError


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Priority(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Point(pydantic.BaseModel):
    x: float
    y: float = 0.0


class Tree(pydantic.BaseModel):
    value: int
    children: list[Tree] = []


def f_str(a: str): ...
def f_int(a: int): ...
def f_float(a: float): ...
def f_bool(a: bool): ...
def f_optional(a: Optional[int] = None): ...  # noqa: UP045 - the old spelling is the point
def f_pipe_none(a: int | None = None): ...
def f_union(a: Union[int, str]): ...  # noqa: UP007
def f_list(a: list[int]): ...
def f_list_str_default(a: list[str] | None = None): ...
def f_dict(a: dict): ...
def f_dict_typed(a: dict[str, float]): ...
def f_literal(a: Literal["add", "sub"]): ...
def f_literal_int(a: Literal[1, 2, 3]): ...
def f_enum(a: Color): ...
def f_int_enum(a: Priority = Priority.LOW): ...
def f_model(a: Point): ...
def f_default(a: int = 3, b: str = "x"): ...
def f_annotated(a: Annotated[int, pydantic.Field(ge=0, le=10)]): ...
def f_any(a: Any): ...
def f_unannotated(a, b=2): ...
def f_nested(a: list[dict[str, int]]): ...
def f_tuple(a: tuple[int, str]): ...
def f_recursive(a: Tree): ...
def f_no_args(): ...


CASES = [
    (f_str, {"a": {"type": "string"}}, ["a"]),
    (f_int, {"a": {"type": "integer"}}, ["a"]),
    (f_float, {"a": {"type": "number"}}, ["a"]),
    (f_bool, {"a": {"type": "boolean"}}, ["a"]),
    (f_optional, {"a": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}}, []),
    (f_pipe_none, {"a": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None}}, []),
    (f_union, {"a": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}, ["a"]),
    (f_list, {"a": {"type": "array", "items": {"type": "integer"}}}, ["a"]),
    (
        f_list_str_default,
        {
            "a": {
                "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
                "default": None,
            }
        },
        [],
    ),
    (f_dict, {"a": {"type": "object", "additionalProperties": True}}, ["a"]),
    (f_dict_typed, {"a": {"type": "object", "additionalProperties": {"type": "number"}}}, ["a"]),
    (f_literal, {"a": {"type": "string", "enum": ["add", "sub"]}}, ["a"]),
    (f_literal_int, {"a": {"type": "integer", "enum": [1, 2, 3]}}, ["a"]),
    (f_enum, {"a": {"type": "string", "enum": ["red", "green"]}}, ["a"]),
    (f_int_enum, {"a": {"type": "integer", "enum": [1, 2], "default": 1}}, []),
    (
        f_model,
        {
            "a": {
                "type": "object",
                "properties": {"x": {"type": "number"}, "y": {"type": "number", "default": 0.0}},
                "required": ["x"],
            }
        },
        ["a"],
    ),
    (
        f_default,
        {"a": {"type": "integer", "default": 3}, "b": {"type": "string", "default": "x"}},
        [],
    ),
    (f_annotated, {"a": {"type": "integer", "minimum": 0, "maximum": 10}}, ["a"]),
    (f_any, {"a": {}}, ["a"]),
    (f_unannotated, {"a": {}, "b": {"default": 2}}, ["a"]),
    (
        f_nested,
        {
            "a": {
                "type": "array",
                "items": {"type": "object", "additionalProperties": {"type": "integer"}},
            }
        },
        ["a"],
    ),
    (
        f_tuple,
        {
            "a": {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "string"}],
                "minItems": 2,
                "maxItems": 2,
            }
        },
        ["a"],
    ),
    (f_no_args, {}, []),
]


def _without_descriptions(node):
    if isinstance(node, dict):
        return {k: _without_descriptions(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_without_descriptions(v) for v in node]
    return node


@pytest.mark.parametrize(
    ("func", "properties", "required"), CASES, ids=[c[0].__name__ for c in CASES]
)
def test_schema_from_type_hints(func, properties, required):
    parameters = tool(func).schema["function"]["parameters"]
    assert parameters["type"] == "object"
    assert parameters["additionalProperties"] is False
    assert _without_descriptions(parameters["properties"]) == properties
    assert sorted(parameters.get("required", [])) == sorted(required)
    assert "title" not in str(parameters.keys())


def test_recursive_model_keeps_its_definition():
    parameters = tool(f_recursive).parameters
    assert parameters["properties"]["a"]["properties"]["children"]["items"] == {
        "$ref": "#/$defs/Tree"
    }
    assert parameters["$defs"]["Tree"]["properties"]["value"] == {"type": "integer"}


def test_schema_shape_is_openai_function_calling():
    def lookup(query: str) -> str:
        """Look something up."""
        return query

    schema = tool(lookup).schema
    assert set(schema) == {"type", "function"}
    assert schema["type"] == "function"
    assert set(schema["function"]) == {"name", "description", "parameters"}
    assert schema["function"]["name"] == "lookup"
    assert schema["function"]["description"] == "Look something up."


def google_style(city: str, days: int = 1) -> str:
    """Get the weather forecast.

    Uses the national service.

    Args:
        city: Name of the city,
            possibly with a country.
        days: How many days ahead.

    Returns:
        The forecast.
    """
    return city


def numpy_style(city: str, days: int = 1) -> str:
    """Get the weather forecast.

    Parameters
    ----------
    city : str
        Name of the city.
    days : int
        How many days ahead.

    Returns
    -------
    str
        The forecast.
    """
    return city


def rest_style(city: str, days: int = 1) -> str:
    """Get the weather forecast.

    :param city: Name of the city.
    :param days: How many days ahead.
    """
    return city


@pytest.mark.parametrize(
    "func", [google_style, numpy_style, rest_style], ids=["google", "numpy", "rest"]
)
def test_docstring_styles(func):
    function = tool(func).schema["function"]
    assert function["description"].startswith("Get the weather forecast.")
    assert "Returns" not in function["description"]
    assert "city" not in function["description"]
    properties = function["parameters"]["properties"]
    assert properties["city"]["description"].startswith("Name of the city")
    assert properties["days"]["description"] == "How many days ahead."


def test_google_long_description_and_multiline_argument():
    function = tool(google_style).schema["function"]
    assert function["description"] == "Get the weather forecast.\n\nUses the national service."
    assert function["parameters"]["properties"]["city"]["description"] == (
        "Name of the city, possibly with a country."
    )


def test_structured_docstrings_keep_their_lines():
    def listing(mode: str) -> str:
        """Run in a mode.

        Modes:
        - fast: skip checks
        - slow: check everything

        Args:
            mode: One of
                fast or slow.
        """
        return mode

    function = tool(listing).schema["function"]
    assert function["description"] == (
        "Run in a mode.\n\nModes:\n- fast: skip checks\n- slow: check everything"
    )
    assert function["parameters"]["properties"]["mode"]["description"] == "One of fast or slow."


def test_decorator_options_override_name_and_description():
    @tool(name="weather", description="Forecast for a city.")
    def get(city: str) -> str:
        return city

    assert get.name == "weather"
    assert get.schema["function"] == {
        "name": "weather",
        "description": "Forecast for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    }


def test_parameter_names_that_clash_with_pydantic_internals():
    @tool
    def odd(schema: str, model_config: int, _private: bool = False) -> str:
        return f"{schema}-{model_config}-{_private}"

    assert set(odd.parameters["properties"]) == {"schema", "model_config", "_private"}
    result = odd.call_sync({"schema": "s", "model_config": 2, "_private": True})
    assert result.observation == "s-2-True"


def test_schema_is_a_copy():
    decorated = tool(f_str)
    decorated.schema["function"]["parameters"]["properties"].clear()
    assert decorated.schema["function"]["parameters"]["properties"] == {"a": {"type": "string"}}


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f(*args): ...", "*args"),
        ("def f(**kwargs): ...", "*kwargs"),
        ("def f(a, /): ...", "positional-only"),
        ("def f(a: 'Undefined'): ...", "cannot resolve its type hints"),
        ("import threading\ndef f(a: threading.Lock): ...", "JSON Schema"),
    ],
)
def test_definition_errors(source, message):
    namespace: dict = {}
    exec(source, namespace)
    with pytest.raises(ToolDefinitionError, match=message.replace("*", r"\*")):
        tool(namespace["f"])


def test_env_tool_needs_an_env_parameter():
    with pytest.raises(ToolDefinitionError, match="no 'env' parameter"):

        @tool(env="python")
        def run(code: str) -> str:
            return code


def test_env_parameter_is_hidden_from_the_schema():
    @tool(env="python")
    def run(env, code: str) -> str:
        return code

    assert list(run.parameters["properties"]) == ["code"]
    assert run.env == "python"


@pytest.mark.parametrize("bad", ["has space", "", "semi;colon"])
def test_invalid_tool_names(bad):
    with pytest.raises(ToolDefinitionError, match="not valid"):
        tool(name=bad)(f_str)


def test_future_annotations_module():
    from tests.helpers.future_annotations_tools import search

    properties = search.parameters["properties"]
    assert properties["query"] == {"type": "string", "description": "What to look for."}
    assert properties["limit"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]
    assert properties["tags"]["anyOf"][0] == {"type": "array", "items": {"type": "string"}}
    assert properties["mode"]["enum"] == ["fast", "slow"]
    assert properties["kind"]["enum"] == ["web", "news"]
    assert properties["options"]["anyOf"][0]["properties"]["depth"]["type"] == "integer"
    result = search.call_sync({"query": "q", "mode": "slow", "options": {"depth": 3}})
    assert result.ok, result.observation
    assert '"mode": "slow"' in result.observation and '"depth": 3' in result.observation
