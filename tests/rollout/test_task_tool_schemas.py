"""A row's tool schemas read into OpenAI form: both shapes, BFCL's types, one-line errors."""

from __future__ import annotations

import json

import pytest

from agentfly_cli.errors import UserError
from agentfly_cli.rollout.task_tool_schemas import (
    check_task_tools,
    normalize_tool,
    normalize_tools,
)
from agentfly_cli.settings.rollout import TaskToolsSettings
from agentfly_cli.settings.run import DataSettings, RunSettings

BFCL = {
    "name": "math.factorial",
    "description": "The factorial of n.",
    "parameters": {
        "type": "dict",
        "properties": {
            "n": {"type": "integer", "description": "a number"},
            "xs": {"type": "tuple", "items": {"type": "float"}},
            "v": {"type": "any", "description": "anything"},
            "s": {"type": "String"},
            "m": {"type": "HashMap", "additionalProperties": {"type": "long"}},
            "u": {"anyOf": [{"type": "dict"}, {"type": ["float", "null"]}]},
        },
        "required": ["n"],
    },
}


def test_bfcl_types_become_json_schema():
    tool = normalize_tool(BFCL)
    assert tool["type"] == "function" and tool["function"]["name"] == "math.factorial"
    parameters = tool["function"]["parameters"]
    assert parameters["type"] == "object" and parameters["required"] == ["n"]
    properties = parameters["properties"]
    assert properties["xs"] == {"type": "array", "items": {"type": "number"}}
    assert properties["v"] == {"description": "anything"}  # any value
    assert properties["s"] == {"type": "string"}
    assert properties["m"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert properties["u"] == {"anyOf": [{"type": "object"}, {"type": ["number", "null"]}]}
    assert BFCL["parameters"]["type"] == "dict"  # the row itself is left as it was


def test_wrapped_bare_and_json_string_forms_agree():
    wrapped = {"type": "function", "function": BFCL}
    assert normalize_tools([wrapped]) == normalize_tools([BFCL])
    assert normalize_tools(json.dumps([BFCL])) == normalize_tools([BFCL])
    assert normalize_tools(None) == normalize_tools([]) == normalize_tools("") == []


def test_draft4_tuple_items_become_prefix_items():
    items = {
        "type": "tuple",
        "items": [{"type": "float"}, {"type": "str"}],
        "additionalItems": False,
    }
    [tool] = normalize_tools([{"name": "f", "parameters": {"properties": {"p": items}}}])
    assert tool["function"]["parameters"]["properties"]["p"] == {
        "type": "array",
        "prefixItems": [{"type": "number"}, {"type": "string"}],
        "items": False,
    }


def test_no_parameters_is_a_tool_without_arguments():
    [tool] = normalize_tools([{"name": "now"}])
    assert tool == {
        "type": "function",
        "function": {"name": "now", "parameters": {"type": "object", "properties": {}}},
    }


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("[{", "tools is a string but not JSON"),
        ({"name": "f"}, "tools is one object; give a list of tool schemas"),
        (3, "tools is not a list (got int); give a list"),
        (["f"], "tools[0] is not a tool schema object (got str)"),
        ([{"type": "code_interpreter"}], "tools[0] is not a function tool"),
        ([{"name": "two words"}], "tools[0] ('two words') has the name 'two words'; give a name"),
        ([{"name": "f", "description": 3}], "('f') has a description that is not a string"),
        ([{"name": "f", "parameters": []}], "('f') has parameters that are not an object schema"),
        ([{"name": "f", "parameters": {"type": "string"}}], "has parameters of type 'string'"),
        (
            [{"name": "f", "parameters": {"type": "dict", "properties": {"a": {"type": "x"}}}}],
            "has parameters.properties.a.type 'x', which is not a JSON Schema type",
        ),
        (
            [{"name": "f", "parameters": {"type": "object", "required": "a"}}],
            'has parameters.required "a", which is not a list of argument names; fix the schema',
        ),
        (
            [{"name": "f", "parameters": {"type": "dict", "properties": {"a": "string"}}}],
            'has parameters.properties.a "string", which is not a schema',
        ),
        (
            [{"name": "f", "parameters": {"properties": {"a": {"minimum": "0"}}}}],
            'has parameters.properties.a.minimum "0", which is not a number',
        ),
        (
            [{"name": "f", "parameters": {"properties": {"a": {"pattern": "(["}}}}],
            'has parameters.properties.a.pattern "([", not a pattern',
        ),
        (
            [{"name": "f", "parameters": {"properties": {"a": {"anyOf": []}}}}],
            "has parameters.properties.a.anyOf [], which is not a list of schemas",
        ),
        ([{"name": "f"}, {"name": "f"}], "tools[1] ('f') is named a second time"),
    ],
)
def test_malformed_schemas_are_one_line_naming_the_row(value, message):
    rows = [{"question": "fine"}, {"question": "q", "tools": value}]
    with pytest.raises(UserError) as caught:
        check_task_tools(rows, "data.jsonl", "tools", [])
    assert str(caught.value).startswith("data.jsonl row 2: ")
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_field_of_another_name_or_none():
    rows = [{"question": "q", "tools": "ignored", "function": [BFCL]}]
    check_task_tools(rows, "data.jsonl", "function", [])
    check_task_tools(rows, "data.jsonl", None, [])  # data.tools_field: null
    with pytest.raises(UserError, match="row 1: function.*run's tool 'math.factorial'"):
        check_task_tools(rows, "data.jsonl", "function", ["math.factorial"])


def test_settings_defaults_and_the_env_rule():
    assert DataSettings().tools_field == "tools"
    settings = TaskToolsSettings()
    assert (settings.on_call, settings.mock, settings.env) == ("end", '{"status": "ok"}', None)
    assert RunSettings().rollout.task_tools == settings
    with pytest.raises(ValueError, match="on_call: env needs rollout.task_tools.env"):
        TaskToolsSettings(on_call="env")
    assert TaskToolsSettings(on_call="env", env="bfcl").env == "bfcl"
    with pytest.raises(ValueError):
        TaskToolsSettings(on_call="run")


def test_what_is_accepted_is_valid_json_schema_and_validates_calls():
    """The quick check accepts what JSON Schema's own metaschema accepts, for BFCL-like rows
    (the benchmark's), and the read schemas check arguments as JSON Schema 2020-12 does."""
    from jsonschema import Draft202012Validator

    from agentfly_cli.components.schema import JsonSchemaArguments
    from tests.helpers.paths import load_script

    bench = load_script("benchmarks/task_tools_bench.py")
    for row in bench.make_rows(60) + [{"function": [BFCL]}]:
        for tool in normalize_tools(row["function"]):
            Draft202012Validator.check_schema(tool["function"]["parameters"])
    items = {
        "type": "tuple",
        "items": [{"type": "float"}, {"type": "str"}],
        "additionalItems": False,
    }
    [tool] = normalize_tools([{"name": "f", "parameters": {"properties": {"p": items}}}])
    spec = JsonSchemaArguments(tool["function"]["parameters"], label="f", check=False)
    assert spec.validate({"p": [1.5, "x"]}) == {"p": [1.5, "x"]}
    for bad in ([1.5, 2], [1.5, "x", "extra"]):
        with pytest.raises(Exception, match="p"):
            spec.validate({"p": bad})
