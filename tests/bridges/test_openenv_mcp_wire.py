"""How the openenv bridge reads OpenEnv's MCP messages (no server needed): the listed tools as
function schemas, the schema that says MCP, and a call_tool answer as the model's observation."""

from __future__ import annotations

from bridges_builtin.openenv_mcp import call_action, function_schema, is_mcp_schema, tool_result


def _answer(observation, reward=None, done=False) -> dict:
    return {"observation": observation, "reward": reward, "done": done}


def test_a_listed_tool_is_a_function_schema():
    listed = {"name": "guess", "description": "Guess.", "input_schema": {
        "title": "guessArguments", "type": "object", "properties": {"number": {"type": "integer"}},
        "required": ["number"]}}  # fmt: skip
    function = function_schema(listed)["function"]
    assert function == {
        "name": "guess",
        "description": "Guess.",
        "parameters": {
            "type": "object",
            "properties": {"number": {"type": "integer"}},
            "required": ["number"],
        },
    }
    bare = function_schema({"name": "hint", "description": None, "inputSchema": {}})["function"]
    assert bare["parameters"] == {"type": "object", "properties": {}} and bare["description"] == ""


def test_the_call_tool_action_schema_says_mcp():
    assert is_mcp_schema({"properties": {"type": {}, "tool_name": {}, "arguments": {}}})
    assert not is_mcp_schema({"properties": {"guess": {"type": "string"}}})
    assert call_action("guess", {"number": 3}) == {
        "type": "call_tool", "tool_name": "guess", "arguments": {"number": 3}}  # fmt: skip


def test_a_result_is_its_text_with_the_reward_and_done():
    result = {"content": [{"type": "text", "text": "Right!"}], "data": "Right!", "is_error": False}
    ok = tool_result(_answer({"tool_name": "guess", "result": result}, 1.0, True))
    assert ok.ok and ok.observation == "Right!" and ok.info == {"done": True, "reward": 1.0}
    quiet = tool_result(_answer({"tool_name": "hint", "result": {"content": [], "data": 7}}))
    assert quiet.observation == "7" and quiet.info == {}  # no reward, not done: no report


def test_errors_are_counted_of_the_framework_kind():
    missing = {"error_type": "invalid_args", "message": "Missing required argument"}
    bad = tool_result(_answer({"tool_name": "guess", "result": None, "error": missing}))
    assert not bad.ok and bad.error_kind == "invalid_arguments"
    assert bad.observation == "Missing required argument"
    unknown = {"error_type": "tool_not_found", "message": "Unknown tool: 'nope'"}
    assert tool_result(_answer({"error": unknown})).error_kind == "unknown_tool"
    failed = {"content": [{"type": "text", "text": "boom"}], "is_error": True}
    raised = tool_result(_answer({"tool_name": "guess", "result": failed}, 0.0, True))
    assert not raised.ok and raised.observation == "boom" and raised.error_kind == "exception"
    assert raised.info == {"done": True, "reward": 0.0}
