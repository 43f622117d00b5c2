"""Tasks that bring their own tools (data.tools_field): rendered by the template, read by the
parser, checked against the row's schema, and answered as rollout.task_tools.on_call says."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentfly_cli.backends.scripted import ScriptedBackend
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.components.tools import ToolErrorKind
from agentfly_cli.envs.base import BaseEnv, EnvSpec
from agentfly_cli.errors import UserError
from agentfly_cli.rollout.engine import RolloutEngine
from agentfly_cli.settings.rollout import RolloutSettings, TaskToolsSettings
from tests.helpers.realdata_paths import find_tokenizer, missing_reason
from tools_builtin.answer import answer
from tools_builtin.calculator import calculator

# as BFCL writes a function: bare, "dict" for object, "float", "tuple", "any"
AREA = {
    "name": "geometry.triangle_area",
    "description": "Calculate the area of a triangle from its base and height.",
    "parameters": {
        "type": "dict",
        "properties": {
            "base": {"type": "float", "description": "The base of the triangle."},
            "height": {"type": "integer", "description": "The height of the triangle."},
            "unit": {"type": "string", "description": "The unit (default 'units')."},
            "corners": {"type": "tuple", "items": {"type": "any"}},
        },
        "required": ["base", "height"],
    },
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def call(name: str, /, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@pytest.fixture(scope="module")
def chat(tiny_model) -> ChatTemplate:
    return ChatTemplate.load(str(tiny_model))  # chatml-tools: lists the tools it is given


def engine_for(
    chat, script, tools=(), on_call="end", parser="hermes", env_specs=None, **task_tools
):
    settings = RolloutSettings(
        n=1, max_turns=4, seed=0, max_errors=3,
        task_tools=TaskToolsSettings(on_call=on_call, **task_tools),
    )  # fmt: skip
    return RolloutEngine(
        ScriptedBackend(script, chat), chat, get_parser(parser), list(tools), None, settings,
        env_specs=env_specs,
    )  # fmt: skip


def run(engine, tasks):
    return asyncio.run(engine.run(tasks))


def test_a_call_to_a_row_tool_is_recorded_and_ends_the_chain(chat):
    script = [[call("geometry.triangle_area", base=3.5, height=2), "never sampled"]]
    [trajectory] = run(engine_for(chat, script), [{"question": "Area?", "tools": [AREA]}])
    trajectory.check()
    assert trajectory.finish_reason == "declared_call"
    assert trajectory.num_turns == 1
    [record] = trajectory.tool_calls
    assert (record.name, record.status, record.error_kind) == ("geometry.triangle_area", "ok", None)
    assert record.arguments == {"base": 3.5, "height": 2}
    assert trajectory.prediction == ""  # what the parser gives: no text beside the call


def test_row_tools_are_in_the_first_prompt_normalised_to_json_schema(chat):
    script = [[call("get_weather", city="Oslo")]]
    engine = engine_for(chat, script, tools=[calculator])
    [trajectory] = run(engine, [{"question": "Weather?", "tools": [AREA, WEATHER]}])
    prompt = chat.decode(trajectory.ids[: trajectory.turns[0].end])
    for text in ('"name": "calculator"', '"name": "geometry.triangle_area"', "get_weather"):
        assert text in prompt
    assert '"type": "dict"' not in prompt and '"type": "float"' not in prompt
    assert '"type": "object"' in prompt and '"type": "number"' in prompt
    schemas = [
        calculator.schema,
        *engine.task_tools.for_task({"tools": [AREA, WEATHER]}).schemas[1:],
    ]
    expected = chat.encode_text(
        chat.render_text([{"role": "user", "content": "Weather?"}], schemas, True)
    )
    assert trajectory.ids[: trajectory.turns[0].end] == expected


def test_rows_without_tools_are_as_before(chat):
    script = [[call("calculator", expression="2+3"), call("answer", answer="5")]] * 2
    tasks = [{"question": "2+3?"}, {"question": "2+3?", "tools": []}]
    with_rows = engine_for(chat, script, tools=[calculator, answer])
    without = engine_for(chat, script, tools=[calculator, answer])
    without.task_tools.field = None  # data.tools_field: null
    for a, b in zip(run(with_rows, tasks), run(without, tasks), strict=True):
        assert a.ids == b.ids and a.finish_reason == b.finish_reason == "terminal_tool"
    assert with_rows.task_tools.for_task(tasks[0]) is with_rows.task_tools.base


def test_bad_arguments_are_a_counted_error_observation(chat):
    script = [
        [
            call("geometry.triangle_area", base="wide", height=2),
            call("geometry.triangle_area", base=3, height=2, colour="red"),
            call("geometry.triangle_area", height=2),
            "never sampled",
        ]
    ]
    [trajectory] = run(engine_for(chat, script), [{"question": "Area?", "tools": [AREA]}])
    trajectory.check()
    kinds = [c.error_kind for c in trajectory.tool_calls]
    assert kinds == [ToolErrorKind.INVALID_ARGUMENTS] * 3
    assert "argument 'base'" in trajectory.tool_calls[0].observation
    assert "unknown argument 'colour'" in trajectory.tool_calls[1].observation
    assert "missing required argument 'base'" in trajectory.tool_calls[2].observation
    assert trajectory.finish_reason == "errors"  # counted: the error budget (3) ran out


def test_a_good_call_after_a_bad_one_ends_the_chain(chat):
    script = [[call("get_weather"), call("get_weather", city="Oslo")]]
    [trajectory] = run(engine_for(chat, script), [{"question": "Weather?", "tools": [WEATHER]}])
    trajectory.check()
    assert [c.status for c in trajectory.tool_calls] == ["error", "ok"]
    assert trajectory.finish_reason == "declared_call" and trajectory.num_turns == 2


def test_mock_answers_with_the_rows_mock_result_else_the_default(chat):
    script = [
        [call("get_weather", city="Oslo"), call("geometry.triangle_area", base=1, height=1), "done"]
    ]
    task = {"question": "q", "tools": [AREA, WEATHER], "mock_results": {"get_weather": {"t": 21}}}
    engine = engine_for(chat, script, on_call="mock", mock="MOCKED")
    [trajectory] = run(engine, [task])
    trajectory.check()
    assert [c.observation for c in trajectory.tool_calls] == ['{"t": 21}', "MOCKED"]
    assert trajectory.finish_reason == "answer" and trajectory.prediction == "done"
    assert "MOCKED" in chat.decode(trajectory.ids)  # the model read it


class Recorder(BaseEnv):
    """Answers a row tool's call with a dict, as an env of the reward channel does."""

    steps: list = []

    async def step(self, action):
        Recorder.steps.append(action)
        if action["tool"] == "get_weather":
            return {"observation": "sunny", "reward": 0.5, "done": False, "info": {"k": 1}}
        return "plain text"


def test_env_mode_sends_the_call_to_the_env(chat):
    Recorder.steps = []
    script = [
        [call("get_weather", city="Oslo"), call("geometry.triangle_area", base=2, height=3), "ok"]
    ]
    engine = engine_for(
        chat, script, on_call="env", env="recorder",
        env_specs={"recorder": EnvSpec(name="recorder", factory=Recorder)},
    )  # fmt: skip
    [trajectory] = run(engine, [{"question": "q", "tools": [AREA, WEATHER]}])
    trajectory.check()
    assert Recorder.steps == [
        {"tool": "get_weather", "arguments": {"city": "Oslo"}},
        {"tool": "geometry.triangle_area", "arguments": {"base": 2, "height": 3}},
    ]
    assert [c.observation for c in trajectory.tool_calls] == ["sunny", "plain text"]
    assert trajectory.finish_reason == "answer"


def test_env_mode_results_carry_reward_and_done_for_the_reward_channel():
    from agentfly_cli.rollout.task_tools import env_result

    result = env_result({"observation": {"a": 1}, "reward": 1, "done": True, "info": {"x": 2}})
    assert result.observation == '{"a": 1}'
    assert result.info == {"x": 2, "reward": 1.0, "done": True}
    assert env_result("text") == "text"


def test_env_mode_without_its_env_given_is_refused(chat):
    with pytest.raises(ValueError, match="recorder"):
        engine_for(chat, [], on_call="env", env="recorder")


def test_a_row_tool_named_like_a_run_tool_is_one_error_naming_both(chat):
    engine = engine_for(chat, [["x"]], tools=[calculator])
    clash = {"name": "calculator", "parameters": {"type": "object", "properties": {}}}
    with pytest.raises(UserError) as caught:
        run(engine, [{"question": "q"}, {"question": "q", "tools": [clash]}])
    message = str(caught.value)
    assert message.startswith("batch b0 row 2: tools[0] 'calculator' has the name of the run's")
    assert "rename the row's tool or drop 'calculator' from the run's tools" in message


def test_unknown_tools_list_the_rows_tools_too(chat):
    script = [[call("nope"), "ok"]]
    [trajectory] = run(
        engine_for(chat, script, tools=[calculator]), [{"question": "q", "tools": [WEATHER]}]
    )
    observation = trajectory.tool_calls[0].observation
    assert "the available tools are: calculator, get_weather" in observation


def test_tool_sets_are_cached_by_content(chat):
    engine = engine_for(chat, [["x"]], parser="qwen3_coder")  # a parser typed by schemas
    first = engine.task_tools.for_task({"tools": [WEATHER, AREA]})
    again = engine.task_tools.for_task({"tools": json.loads(json.dumps([WEATHER, AREA]))})
    other = engine.task_tools.for_task({"tools": [AREA]})
    assert again is first and other is not first
    assert first.parser is not other.parser and first.parser is not engine.parser
    assert first.parser._types["geometry.triangle_area"]["base"] == {"number"}


def test_a_row_tool_typed_by_schema_for_the_qwen3_coder_format(chat):
    xml = (
        "<tool_call>\n<function=geometry.triangle_area>\n<parameter=base>\n2.5\n</parameter>\n"
        "<parameter=height>\n4\n</parameter>\n<parameter=unit>\n10\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    engine = engine_for(chat, [[xml]], parser="qwen3_coder")
    [trajectory] = run(engine, [{"question": "q", "tools": [AREA]}])
    # typed by the row's schema: unit is a string, though it reads as a number
    assert trajectory.tool_calls[0].arguments == {"base": 2.5, "height": 4, "unit": "10"}
    assert trajectory.finish_reason == "declared_call"


def test_the_tool_visibility_check_runs_once_not_per_row(chat, monkeypatch):
    from agentfly_cli.chat import tool_visibility

    checks = []
    real = tool_visibility.template_shows_tools
    monkeypatch.setattr(
        tool_visibility, "template_shows_tools", lambda *a: checks.append(1) or real(*a)
    )
    engine = engine_for(chat, [["ok"]] * 5)
    tasks = [{"question": "q", "tools": [dict(AREA, name=f"area_{i}")]} for i in range(5)]
    run(engine, tasks)
    assert len(checks) == 1


def test_malformed_row_tools_are_refused_before_anything_runs(chat):
    engine = engine_for(chat, [["x"]])
    bad = dict(AREA, parameters={"type": "dict", "properties": {"x": {"type": "citystring"}}})
    with pytest.raises(UserError) as caught:
        run(engine, [{"question": "q", "tools": [WEATHER, bad]}])
    assert str(caught.value) == (
        "batch b0 row 1: tools[1] ('geometry.triangle_area') has parameters.properties.x.type "
        "'citystring', which is not a JSON Schema type; use one of string, number, integer, "
        "boolean, array, object, null (BFCL's dict, float, tuple and any are read too)"
    )


# -- a real template that takes tools ----------------------------------------------------------
def test_row_tools_on_the_real_qwen25_template_are_token_exact():
    folder = find_tokenizer("qwen2.5")
    if folder is None:
        pytest.skip("qwen2.5: " + missing_reason())
    chat = ChatTemplate.load(str(folder), str(folder / "chat_template.jinja"))
    script = [
        [
            "Let me check.\n" + call("get_weather"),  # bad arguments first
            call("get_weather", city="Paris") + "\n" + call("calculator", expression="1+1"),
        ]
    ]
    engine = engine_for(chat, script, tools=[calculator])
    tasks = [{"question": "Weather in Paris?", "tools": [WEATHER, AREA]}]
    [trajectory] = run(engine, tasks)
    trajectory.check()
    prompt = chat.decode(trajectory.ids[: trajectory.turns[0].end])
    assert "<tools>" in prompt and '"name": "get_weather"' in prompt
    assert '"name": "geometry.triangle_area"' in prompt and '"name": "calculator"' in prompt
    assert [(c.name, c.status) for c in trajectory.tool_calls] == [
        ("get_weather", "error"), ("get_weather", "ok"), ("calculator", "ok"),
    ]  # fmt: skip
    assert trajectory.finish_reason == "declared_call"
    # Qwen2.5 is prefix-preserving: the record is the template's own rendering
    messages = [{k: v for k, v in m.items() if k != "tool_calls"} for m in trajectory.messages]
    while messages[-1]["role"] != "assistant":  # the last observation has no tokens
        messages.pop()
    schemas = engine.task_tools.for_task(tasks[0]).schemas
    rendered = chat.encode_text(chat.render_text(messages, schemas))
    assert rendered[: len(trajectory.ids)] == trajectory.ids
    assert chat.decode(rendered[len(trajectory.ids) :]).strip() == ""


def test_unlisted_row_tools_are_callable_but_not_rendered(chat):
    script = [[call("get_weather", city="Oslo")]]
    task = {"question": "Weather?", "tools": [AREA, WEATHER], "unlisted_tools": ["get_weather"]}
    [trajectory] = run(engine_for(chat, script), [task])
    prompt = chat.decode(trajectory.ids[: trajectory.turns[0].end])
    assert "geometry.triangle_area" in prompt and "get_weather" not in prompt
    [record] = trajectory.tool_calls
    assert (record.name, record.status) == ("get_weather", "ok")
    assert trajectory.finish_reason == "declared_call"
    with pytest.raises(UserError, match="'unlisted_tools' names nope, which are not among"):
        engine_for(chat, script).task_tools.for_task({**task, "unlisted_tools": ["nope"]})
