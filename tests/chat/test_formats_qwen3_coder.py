"""Qwen3-Coder XML tool calls: the parser (values typed by the tools' schemas, or guessed), the
packaged ``qwen3_coder`` template on the real Qwen3 tokenizer (round trip, exact deltas), the
doctor's verdicts, and the line between it and the Hermes JSON format (both use <tool_call>)."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from agentfly_cli.backends.scripted import ScriptedBackend
from agentfly_cli.chat.formats.xml_calls import Qwen3CoderParser
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.sources import guess_parser, packaged_templates
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.cli.app import build_app
from agentfly_cli.components.tools import tool
from agentfly_cli.rollout.engine import RolloutEngine
from agentfly_cli.settings.rollout import RolloutSettings
from tests.chat.test_chat_templates import (
    MESSAGES,
    assert_mask_invariant,
    assert_matches_full_render,
    simulate,
)
from tests.chat.test_parser_limits import check_bounded
from tests.helpers.parse_timing import ParseClock
from tests.helpers.realdata_paths import real_tokenizer

PARSER = Qwen3CoderParser()


def schema(name: str, **properties: dict) -> dict:
    parameters = {"type": "object", "properties": properties}
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


TOOLS = [
    schema("calculator", expression={"type": "string", "description": "e.g. 2 + 3"}),
    schema(
        "write_file",
        path={"type": "string"},
        content={"type": "string"},
        mode={"type": "integer"},
        append={"type": "boolean"},
        tags={"type": "array", "items": {"type": "string"}},
        meta={"type": "object"},
        limit={"anyOf": [{"type": "integer"}, {"type": "null"}]},
        anything={},
    ),
]
TYPED = PARSER.with_tools(TOOLS)


def xml(name: str, **arguments: str) -> str:
    """One call as the qwen3_coder template writes it (values already text)."""
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in arguments.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def calls(parsed) -> list[tuple[str, object]]:
    return [(c.name, c.arguments) for c in parsed.calls]


# -- the format -------------------------------------------------------------------------------
def test_one_call_and_the_content_before_it():
    parsed = PARSER.parse("I will add.\n" + xml("calculator", expression="2 + 3") + "<|im_end|>")
    assert calls(parsed) == [("calculator", {"expression": "2 + 3"})]
    assert parsed.content == "I will add." and not parsed.errors
    assert parsed.calls[0].raw.startswith("<function=calculator>")


def test_several_calls_blocks_and_a_bare_function():
    two = xml("a", x="1") + "\n" + xml("b")
    one_block = "<tool_call>\n<function=a>\n</function>\n<function=b>\n</function>\n</tool_call>"
    bare = "<function=a>\n<parameter=x>\nhi\n</parameter>\n</function>"
    assert calls(PARSER.parse(two)) == [("a", {"x": 1}), ("b", {})]
    assert calls(PARSER.parse(one_block)) == [("a", {}), ("b", {})]
    assert calls(PARSER.parse("Text " + bare)) == [("a", {"x": "hi"})]
    assert PARSER.parse("Text " + bare).content == "Text"


def test_values_keep_their_lines_and_indentation():
    code = "def f(x):\n    return x\n\n"
    parsed = PARSER.parse(xml("write_file", content=code) + "<parameter=x>y</parameter>")
    assert parsed.calls[0].arguments == {"content": code}
    inline = "<function=a><parameter=x> spaced </parameter></function>"
    assert calls(PARSER.parse(inline)) == [("a", {"x": " spaced "})]


GUESSES = {  # the value as written -> without a schema
    "42": 42,
    "-2.5": -2.5,
    "true": True,
    '{"a": [1]}': {"a": [1]},
    "[1, 2]": [1, 2],
    "null": "null",
    "hello world": "hello world",
    '"quoted"': '"quoted"',
    "NaN": "NaN",
    "1e999": "1e999",
    "02139": "02139",
}


@pytest.mark.parametrize("written", list(GUESSES))
def test_without_schemas_json_numbers_booleans_objects_and_arrays_are_decoded(written):
    assert PARSER.parse(xml("t", v=written)).calls[0].arguments == {"v": GUESSES[written]}


def test_with_schemas_each_value_gets_its_parameters_type():
    text = xml(
        "write_file",
        path="42",
        content='{"not": "decoded"}',
        mode="420",
        append="false",
        tags='["a", "b"]',
        meta='{"k": 1}',
        limit="null",
        anything="7",
    )
    [call] = TYPED.parse(text).calls
    assert call.arguments == {
        "path": "42",  # a string parameter keeps the text
        "content": '{"not": "decoded"}',
        "mode": 420,
        "append": False,
        "tags": ["a", "b"],
        "meta": {"k": 1},
        "limit": None,
        "anything": 7,  # a schema that says nothing: guessed
    }
    wrong = TYPED.parse(xml("write_file", mode="fast", append="1", tags="x")).calls[0]
    assert wrong.arguments == {"mode": "fast", "append": "1", "tags": "x"}  # the tool reports
    assert TYPED.parse(xml("calculator", expression="42")).calls[0].arguments == {
        "expression": "42"
    }
    assert PARSER.parse(xml("calculator", expression="42")).calls[0].arguments == {"expression": 42}
    assert TYPED.name == "qwen3_coder" and isinstance(TYPED, Qwen3CoderParser)


def test_calls_inside_think_are_not_run():
    parsed = PARSER.parse("<think>" + xml("a") + "</think>ok " + xml("b", v="x"))
    assert calls(parsed) == [("b", {"v": "x"})] and parsed.reasoning and parsed.content == "ok"


MALFORMED = {
    "unclosed tool_call": ("<tool_call>\n<function=a>\n</function>\n", "is not closed with"),
    "stray close": ("text</tool_call>", "without an opening <tool_call>"),
    "hermes JSON": ('<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>', "holds JSON"),
    "empty block": ("<tool_call>\n</tool_call>", "holds no <function=TOOL_NAME> block"),
    "unclosed function": (
        "<tool_call>\n<function=a>\n<parameter=x>\n1\n</parameter>\n</tool_call>",
        "<function=a> is not closed with </function>",
    ),
    "unclosed parameter": (
        "<function=a>\n<parameter=x>\n1\n</function>",
        "<parameter=x> is not closed with </parameter>",
    ),
    "text outside parameters": ("<function=a>\nx: 1\n</function>", "text outside <parameter"),
    "a name over two lines": ("<function=a\nb>\n</function>", "malformed <function=TOOL_NAME>"),
    "an empty name": ("<function=>\n</function>", "malformed <function=TOOL_NAME>"),
    "a bad parameter tag": ("<function=a>\n<parameter=>1</parameter>\n</function>", "malformed"),
    "a parameter twice": (
        "<function=a><parameter=x>1</parameter><parameter=x>2</parameter></function>",
        "sets <parameter=x> twice",
    ),
    "deep nest": (xml("a", v="[" * 150 + "]" * 150), "levels deep"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_markup_is_an_error_that_shows_the_format(case):
    text, problem = MALFORMED[case]
    parsed = PARSER.parse(text)
    assert not parsed.calls, parsed.calls
    assert parsed.errors, parsed
    assert any(problem in e.message for e in parsed.errors), [e.message for e in parsed.errors]
    for error in parsed.errors:
        assert error.message.endswith(PARSER.expected) and error.raw


def test_hermes_and_qwen3_coder_do_not_misread_each_other():
    hermes = get_parser("hermes")
    [error] = hermes.parse(xml("calculator", expression="2 + 3")).errors
    assert "XML <function=...> call; this format writes JSON" in error.message
    assert not hermes.parse(xml("calculator", expression="2 + 3")).calls
    json_call = (
        '<tool_call>\n{"name": "calculator", "arguments": {"expression": "1"}}\n</tool_call>'
    )
    assert calls(hermes.parse(json_call)) == [("calculator", {"expression": "1"})]
    [error] = PARSER.parse(json_call).errors
    assert "holds JSON; this format writes XML" in error.message
    assert guess_parser("...<tool_call>\n<function=NAME>...") == "qwen3_coder"
    assert guess_parser("...<tool_call>\n{json}...") == "hermes"


def test_lone_surrogates_and_non_strings_do_not_crash():
    parsed = PARSER.parse(xml("a\ud800", v="\udfff"))
    assert calls(parsed) == [("a\ud800", {"v": "\udfff"})]
    assert not PARSER.parse(None).calls  # type: ignore[arg-type]


# -- adversarial sizes (each parse in a child process under a CPU-time cap) -------------------
KB = 1000
ADVERSARIAL = {
    "function starts": "<function=" * (1000 * KB // 10),
    "function starts with names": "<function=a>" * (1000 * KB // 12),
    "a name that never closes": "<function=" + "x" * 1000 * KB,
    "names that close only at the end": "<function=a" * 90_000 + ">",
    "parameter starts in a function": "<function=a>" + "<parameter=" * 90_000 + "</function>",
    "parameters that never close": "<function=a>" + "<parameter=x>" * 70_000 + "</function>",
    "tool_call starts": "<tool_call>" * 90_000,
    "stray closes": "</tool_call>" * 80_000,
    "empty blocks": "<tool_call></tool_call>" * 40_000,
    "one value of 1 MB": xml("a", v="y" * 1000 * KB),
    "one JSON value of 1 MB": xml("a", v="[" + "1," * 500 * KB + "1]"),
    "many valid calls": xml("calculator", expression="1 + 2") * 10_000,
    "lone surrogates": xml("a", v="\ud800" * 500 * KB),
    "closes then starts": "</function>" * 40_000 + "<function=a>" * 40_000,
}


@pytest.fixture(scope="module")
def clock():
    clock = ParseClock()
    yield clock
    clock.close()


@pytest.mark.parametrize("case", list(ADVERSARIAL))
def test_large_adversarial_turns_parse_in_linear_time(clock, case):
    check_bounded(clock, "qwen3_coder", ADVERSARIAL[case])


# -- the engine hands the tools' schemas to the parser ----------------------------------------
@tool
def shout(text: str, times: int = 1) -> str:
    """Repeat the text in capitals.

    Args:
        text: what to shout.
        times: how often.
    """
    return " ".join([text.upper()] * times)


def test_the_engine_types_values_by_the_tools_schemas(tiny_model):
    chat = ChatTemplate.load(tiny_model, "qwen3_coder")
    script = [[xml("shout", text="42", times="2"), "Done."]]
    engine = RolloutEngine(
        ScriptedBackend(script, chat),
        chat,
        get_parser("qwen3_coder"),
        [shout],
        None,
        RolloutSettings(n=1, max_turns=3, seed=0),
    )
    assert engine.parser.name == "qwen3_coder"
    [trajectory] = asyncio.run(engine.run([{"question": "Shout 42 twice."}]))
    [record] = trajectory.tool_calls
    assert record.arguments == {"text": "42", "times": 2}  # "42" stays a string
    assert record.status == "ok" and record.observation == "42 42"


LOOKUP = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string"}, "count": {"type": "integer"}},
            },
        },
    }
]


def test_malformed_schemas_type_nothing_and_break_nothing():
    """What a careless client may send reads as "no schema", never a crash."""
    tools = [
        {"function": {"name": "a", "parameters": {"properties": ["code"]}}},
        {"function": {"name": "b", "parameters": {"properties": {"x": {"anyOf": 5, "enum": 3}}}}},
        {"type": "function", "function": {"name": "lookup", "parameters": "code: string"}},
        {"function": {"name": "c", "parameters": {"properties": {"y": {"oneOf": {"a": 1}}}}}},
    ]
    parsed = Qwen3CoderParser(tools).parse(xml("lookup", code="12") + xml("c", y="[1]"))
    assert calls(parsed) == [("lookup", {"code": 12}), ("c", {"y": [1]})]


@pytest.mark.parametrize(
    ("tools", "expected"),
    [
        (LOOKUP, {"code": "12", "count": 3}),  # the schema says code is a string
        (None, {"code": 12, "count": 3}),  # no schema: a JSON number reads as one
    ],
)
def test_the_gateway_types_values_by_the_requests_tools(tiny_model, tools, expected):
    from agentfly_cli.serve.gateway import Gateway
    from tests.serve.test_serve_capture import Replies

    chat = ChatTemplate.load(tiny_model, "qwen3_coder")
    text = xml("lookup", code="12", count="3")
    gateway = Gateway(Replies(chat, [text, text]), chat, get_parser("qwen3_coder"), "m")
    body = {"messages": [{"role": "user", "content": "Look up 12."}], "tools": tools}
    for _ in range(2):  # the second request reuses the parser typed for these tools
        reply = asyncio.run(gateway.complete(None, body))["choices"][0]
        [call] = reply["message"]["tool_calls"]
        assert json.loads(call["function"]["arguments"]) == expected
        assert reply["finish_reason"] == "tool_calls"
    assert len(gateway._typed_parsers) == (1 if tools else 0)


# -- the packaged template on the real Qwen3 tokenizer ----------------------------------------
@pytest.fixture(scope="module")
def chat():
    return ChatTemplate.load(real_tokenizer("qwen3"), "qwen3_coder")


def test_the_template_lists_the_tools_in_xml(chat):
    assert "qwen3_coder" in packaged_templates()
    assert chat.default_parser == "qwen3_coder" and chat.name == "qwen3_coder"
    assert chat.eot_token_ids[0] == chat.tokenizer.convert_tokens_to_ids("<|im_end|>")
    text = chat.decode(chat.render_prompt(MESSAGES, TOOLS))
    assert text.startswith("<|im_start|>system\nYou are a careful calculator agent.\n\n# Tools")
    assert "<function>\n<name>calculator</name>\n<parameters>\n<parameter>\n<name>expression" in (
        text
    )
    assert "<anyOf>[{" in text and "<function=FUNCTION_NAME>" in text
    assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
    assert chat.decode(chat.render_prompt(MESSAGES[1:], None)).startswith("<|im_start|>user\n")


WRITTEN = [
    ("calculator", {"expression": "12 + 30"}),
    ("write_file", {"path": "a.py", "content": "def f():\n    return 42\n", "mode": 420}),
    ("write_file", {"path": "42", "append": True, "tags": ["x", "y"], "meta": {"k": [1]}}),
    ("write_file", {"content": '{"raw": "json text"}', "limit": None, "anything": "café 中文"}),
]
CONVERSATION = [
    *MESSAGES,
    {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": n, "arguments": a}}
                                                        for n, a in WRITTEN[:1]]},
    {"role": "tool", "content": "42"},
    {"role": "assistant", "content": "Writing.", "tool_calls": [
        {"type": "function", "function": {"name": n, "arguments": a}} for n, a in WRITTEN[1:]]},
    {"role": "tool", "content": "ok"},
    {"role": "tool", "content": "ok"},
    {"role": "tool", "content": "ok"},
    {"role": "assistant", "content": "All done."},
]  # fmt: skip


def test_the_parser_reads_back_every_call_the_template_writes(chat):
    turns = []
    for i, message in enumerate(CONVERSATION):
        if message["role"] == "assistant":
            before = chat.render_text(CONVERSATION[:i], TOOLS, add_generation_prompt=True)
            after = chat.render_text(CONVERSATION[: i + 1], TOOLS)
            assert after.startswith(before)  # prefix-preserving
            turns.append(after[len(before) :].split("<|im_end|>")[0])
    parsed = [TYPED.parse(t) for t in turns]
    assert [calls(p) for p in parsed] == [WRITTEN[:1], WRITTEN[1:], []]
    assert [p.content for p in parsed] == ["", "Writing.", "All done."]
    assert not any(p.errors for p in parsed)
    # without the schemas the string "42" would come back as a number
    assert calls(PARSER.parse(turns[1]))[1][1]["path"] == 42


def test_sampled_turns_with_tool_results_are_token_exact(chat):
    first = "I will add.\n" + xml("calculator", expression="12 + 30")
    second = xml("calculator", expression="6 * 7") + "\n" + xml("calculator", expression="1")
    turns = [
        (first, [("calculator", "c0", "42")]),
        (second, [("calculator", "c1", "42"), ("calculator", "c2", "1")]),
        ("Both are 42.", None),
    ]
    run = simulate(chat, MESSAGES, turns, tools=TOOLS)
    assert_mask_invariant(run)
    assert_matches_full_render(chat, run, tools=TOOLS)
    assert chat.decode(run.deltas[0]) == (
        "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert chat.decode(run.deltas[1]) == (
        "\n<|im_start|>user\n<tool_response>\n42\n</tool_response>\n<tool_response>\n1\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    sampled = chat.decode(run.sampled).split("<|im_end|>")
    assert [len(TYPED.parse(t).calls) for t in sampled[:3]] == [1, 2, 0]


def test_string_arguments_are_refused_with_a_clear_message(chat):
    message = {"role": "assistant", "content": None,
               "tool_calls": [{"function": {"name": "calculator", "arguments": "{}"}}]}  # fmt: skip
    with pytest.raises(Exception, match="give tool call arguments as a mapping"):
        chat.render_text([*MESSAGES, message], TOOLS)


def test_doctor_passes_qwen3_with_the_qwen3_coder_template():
    folder = real_tokenizer("qwen3")
    args = ["doctor", str(folder), "--template", "qwen3_coder", "--json"]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    verdicts = {v["check"]: v["status"] for v in json.loads(result.output)}
    assert verdicts == {
        "end of turn": "pass",
        "tokenizer round trip": "pass",
        "tool schemas": "pass",
        "observation deltas": "pass",
        "parser qwen3_coder reads the template's calls": "pass",
    }
    hermes = CliRunner().invoke(build_app(), [*args, "--parser", "hermes"])
    [row] = [v for v in json.loads(hermes.output) if v["check"].startswith("parser")]
    assert (
        hermes.exit_code == 1 and row["status"] == "fail" and row["fix"] == "--parser qwen3_coder"
    )
