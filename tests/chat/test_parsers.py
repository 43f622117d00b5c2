"""Tool-call parsers: every format, malformed output as data, think blocks, fuzzing."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfly_cli.chat.parsers import (
    ParsedResponse,
    ParseError,
    ToolCall,
    ToolCallParser,
    get_parser,
    parser_names,
    split_think,
)
from agentfly_cli.errors import UserError

LINE_OPTIONS = {
    "commands": {
        "CALC": {"tool": "calculator", "argument": "expression"},
        "SEARCH": {"tool": "search", "argument": "query"},
        "ANSWER": {"tool": None},
    }
}


def parser(name: str) -> ToolCallParser:
    return get_parser(name, LINE_OPTIONS if name == "line" else None)


def calls(parsed: ParsedResponse) -> list[tuple[str, object]]:
    return [(c.name, c.arguments) for c in parsed.calls]


# -- registry ---------------------------------------------------------------------------------
def test_parser_names():
    assert parser_names() == [
        "deepseek_v3",
        "harmony",
        "hermes",
        "line",
        "llama3_json",
        "mistral",
        "pythonic",
        "qwen3_coder",
        "react",
    ]
    for name in parser_names():
        p = parser(name)
        assert p.name == name
        assert isinstance(p, ToolCallParser)


def test_unknown_parser_lists_known_names():
    with pytest.raises(UserError, match="unknown tool-call parser 'json'.*hermes.*react"):
        get_parser("json")


def test_parsers_without_options_ignore_them():
    # a recipe's line-protocol options must not block `--parser hermes` overriding its parser
    assert get_parser("hermes", LINE_OPTIONS).name == "hermes"


# -- hermes -----------------------------------------------------------------------------------
def test_hermes_several_calls_and_content():
    text = (
        "Let me compute both.\n<tool_call>\n"
        '{"name": "calculator", "arguments": {"expression": "1 + 2"}}\n</tool_call>\n'
        '<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}</tool_call><|im_end|>'
    )
    parsed = parser("hermes").parse(text)
    assert calls(parsed) == [("calculator", {"expression": "1 + 2"}), ("search", {"query": "x"})]
    assert parsed.content == "Let me compute both."
    assert parsed.errors == [] and parsed.reasoning is None and parsed.answer is None
    assert parsed.calls[0].raw.startswith("<tool_call>") and parsed.calls[0].id == ""


def test_hermes_accepts_fences_parameters_lists_and_openai_shape():
    text = (
        '<tool_call>```json\n{"name": "a", "parameters": {"x": 1}}\n```</tool_call>'
        '<tool_call>[{"name": "b"}, {"type": "function", "function": {"name": "c", '
        '"arguments": {}}}]</tool_call>'
    )
    assert calls(parser("hermes").parse(text)) == [("a", {"x": 1}), ("b", {}), ("c", {})]


def test_hermes_malformed_calls_are_errors_and_good_ones_survive():
    text = (
        '<tool_call>{"name": "calculator", "arguments": {"expression": "2"}}</tool_call>'
        "<tool_call>{'name': 'calculator'}</tool_call>"
        '<tool_call>{"arguments": {}}</tool_call>'
        '<tool_call>{"name": "calculator", "arguments": [1, 2]}</tool_call>'
        "<tool_call></tool_call>"
        '<tool_call>{"name": "calculator", "arguments": {"expression": "3"}}'
    )
    parsed = parser("hermes").parse(text)
    assert calls(parsed) == [("calculator", {"expression": "2"})]
    messages = [e.message for e in parsed.errors]
    assert len(messages) == 5
    assert "invalid JSON" in messages[0]
    assert 'no "name"' in messages[1]
    assert "must be a JSON object, got a list" in messages[2]
    assert "empty <tool_call>" in messages[3]
    assert "not closed" in messages[4]
    assert all("<tool_call>{" in m for m in messages)  # every message shows the expected format
    assert parsed.errors[4].raw.startswith("<tool_call>{")


def test_hermes_malformed_argument_string_is_kept_as_str():
    text = '<tool_call>{"name": "calculator", "arguments": "{expression: 2}"}</tool_call>'
    parsed = parser("hermes").parse(text)
    assert calls(parsed) == [("calculator", "{expression: 2}")] and not parsed.errors


def test_hermes_stray_closing_tag():
    parsed = parser("hermes").parse('{"name": "calculator"}</tool_call>')
    assert not parsed.calls and "without an opening <tool_call>" in parsed.errors[0].message


# -- think blocks -----------------------------------------------------------------------------
CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "9"}}</tool_call>'


@pytest.mark.parametrize("name", ["hermes", "llama3_json", "mistral", "react", "line"])
def test_calls_inside_think_are_not_run(name):
    inner = {
        "hermes": CALL,
        "llama3_json": '{"name": "calculator", "parameters": {"expression": "9"}}',
        "mistral": '[TOOL_CALLS] [{"name": "calculator", "arguments": {}}]',
        "react": "Action: calculator\nAction Input: 9",
        "line": "CALC: 9",
    }[name]
    parsed = parser(name).parse(f"<think>\nmaybe {inner}\n</think>\n\nNo tool needed.")
    assert parsed.calls == [] and parsed.errors == []
    assert parsed.content == "No tool needed."
    assert parsed.reasoning == f"maybe {inner}"
    unclosed = parser(name).parse(f"Hmm <think>{inner} and more")
    assert unclosed.calls == [] and unclosed.content == "Hmm"
    assert unclosed.reasoning == f"{inner} and more"


def test_split_think_variants():
    assert split_think("plain") == (None, "plain")
    assert split_think("<think></think>x") == ("", "x")
    assert split_think("a<think>r1</think>b<think>r2</think>c") == ("r1\nr2", "abc")
    # the prompt opened the block (e.g. a generation prompt ending in <think>)
    assert split_think("reasoning here</think>\n\nanswer") == ("reasoning here", "\n\nanswer")
    assert split_think("answer</think>") == ("answer", "")
    assert split_think("a<think>r</think>b</think>c") == ("r", "abc")


def test_think_then_call_after_it_is_run():
    parsed = parser("hermes").parse(f"<think>\nI need the tool.\n</think>\n\n{CALL}")
    assert calls(parsed) == [("calculator", {"expression": "9"})]
    assert parsed.reasoning == "I need the tool."


# -- llama3_json ------------------------------------------------------------------------------
def test_llama3_python_tag_and_semicolons():
    text = (
        '<|python_tag|>{"name": "calculator", "parameters": {"expression": "1"}}; '
        '{"name": "search", "arguments": {"query": "q"}}<|eom_id|>'
    )
    parsed = parser("llama3_json").parse(text)
    assert calls(parsed) == [("calculator", {"expression": "1"}), ("search", {"query": "q"})]
    assert parsed.content == "" and not parsed.errors


def test_llama3_plain_json_calls_among_text():
    text = (
        'I will call {"name": "calculator", "parameters": {"expression": "1"}}; '
        '{"name": "calculator", "parameters": {"expression": "2"}}'
    )
    parsed = parser("llama3_json").parse(text)
    assert calls(parsed) == [
        ("calculator", {"expression": "1"}),
        ("calculator", {"expression": "2"}),
    ]
    assert parsed.content == "I will call"


def test_llama3_plain_json_that_is_not_a_call_stays_text():
    text = 'The user is {"name": "Ada", "age": 36}.'
    parsed = parser("llama3_json").parse(text)
    assert parsed.calls == [] and parsed.errors == [] and parsed.content == text


def test_llama3_malformed():
    parsed = parser("llama3_json").parse('{"name": "calculator", "parameters": {expression}}')
    assert not parsed.calls and "invalid JSON" in parsed.errors[0].message
    parsed = parser("llama3_json").parse("<|python_tag|>brave_search.call(query='x')")
    assert not parsed.calls and "after <|python_tag|>" in parsed.errors[0].message
    assert '"parameters"' in parsed.errors[0].message


# -- mistral ----------------------------------------------------------------------------------
def test_mistral_list_and_named_forms():
    text = (
        'Sure.[TOOL_CALLS] [{"name": "calculator", "arguments": {"expression": "1"}, '
        '"id": "abc123xyz"}, {"name": "search", "arguments": "{\\"query\\": \\"q\\"}"}]</s>'
    )
    parsed = parser("mistral").parse(text)
    assert calls(parsed) == [("calculator", {"expression": "1"}), ("search", {"query": "q"})]
    assert parsed.calls[0].id == "abc123xyz" and parsed.content == "Sure."
    named = parser("mistral").parse('[TOOL_CALLS]calculator[ARGS]{"expression": "2"}')
    assert calls(named) == [("calculator", {"expression": "2"})]


def test_mistral_malformed():
    parsed = parser("mistral").parse("[TOOL_CALLS] calculator(2)")
    assert not parsed.calls and "[TOOL_CALLS] [{" in parsed.errors[0].message
    parsed = parser("mistral").parse('[TOOL_CALLS] [{"name": "a", "arguments": {}}, 3]')
    assert calls(parsed) == [("a", {})] and "got a number" in parsed.errors[0].message


# -- react ------------------------------------------------------------------------------------
def test_react_action_with_json_and_plain_input():
    text = (
        'Thought: I need to add.\nAction: calculator\nAction Input: {"expression": "2 + 3"}\n'
        "Observation: 5\nThought: imagined\nAction: search\nAction Input: never run"
    )
    parsed = parser("react").parse(text)
    assert calls(parsed) == [("calculator", {"expression": "2 + 3"})]
    assert parsed.content == "Thought: I need to add."
    plain = parser("react").parse("action: calculator\naction input: 2 + 3\n")
    assert calls(plain) == [("calculator", "2 + 3")]  # a str: the engine maps it to the argument
    quoted = parser("react").parse('Action: `calculator`\nAction Input: "2 + 3"')
    assert calls(quoted) == [("calculator", "2 + 3")]
    empty = parser("react").parse("Action: clock\nAction Input:")
    assert calls(empty) == [("clock", {})]


def test_react_several_actions_in_one_turn():
    text = 'Action: a\nAction Input: {}\nAction: b\nAction Input: {"x": [1]}'
    assert calls(parser("react").parse(text)) == [("a", {}), ("b", {"x": [1]})]


def test_react_final_answer():
    parsed = parser("react").parse("Thought: done.\nFinal Answer: 42\nis the result")
    assert parsed.answer == "42\nis the result" and parsed.calls == [] and not parsed.errors


def test_react_malformed():
    assert "no 'Action Input:'" in parser("react").parse("Action: calculator").errors[0].message
    assert "without an 'Action:'" in parser("react").parse("Action Input: 2").errors[0].message
    bad_name = parser("react").parse("Action: use the calculator please\nAction Input: 2")
    assert not bad_name.calls and "tool name alone" in bad_name.errors[0].message
    no_name = parser("react").parse("Action:\nAction Input: 2")
    assert not no_name.calls and "tool name alone" in no_name.errors[0].message
    both = parser("react").parse("Action: calculator\nAction Input: 2\nFinal Answer: 2")
    assert calls(both) == [("calculator", "2")] and both.answer is None
    assert "both an Action and a Final Answer" in both.errors[0].message


# -- line protocol ----------------------------------------------------------------------------
def test_line_protocol_calls_and_answer():
    text = "Let me see.\n  CALC: 12 + 30   \nSEARCH: capital of France\nANSWER: 42\nANSWER: 43"
    parsed = parser("line").parse(text)
    assert calls(parsed) == [
        ("calculator", {"expression": "12 + 30"}),
        ("search", {"query": "capital of France"}),
    ]
    assert parsed.answer == "42" and parsed.content == "Let me see."
    assert parsed.calls[0].raw == "CALC: 12 + 30"


def test_line_protocol_is_strict_about_prefixes():
    parsed = parser("line").parse("calc: 1 + 1\nCALC 1 + 1\nI said CALC: 2\nCALCULATE: 3")
    assert parsed.calls == [] and parsed.answer is None and not parsed.errors


def test_line_protocol_empty_command_is_an_error():
    parsed = parser("line").parse("CALC:   \nANSWER:")
    assert parsed.calls == [] and parsed.answer is None
    assert [e.raw for e in parsed.errors] == ["CALC:", "ANSWER:"]
    assert "CALC: <expression> or SEARCH: <query> or ANSWER: <answer>" in parsed.errors[0].message


def test_line_protocol_commands_without_a_value():
    options = {
        "commands": {
            "MOVE": {"tool": "move", "argument": "move"},
            "MOVES": {"tool": "legal_moves", "argument": None},
            "BOARD": {"tool": "board", "argument": None},
        }
    }
    line = get_parser("line", options)
    parsed = line.parse("Let me look.\nBOARD\n  MOVES:  \nMOVE: e2e4\nBOARDS\nboard")
    assert calls(parsed) == [("board", {}), ("legal_moves", {}), ("move", {"move": "e2e4"})]
    assert parsed.content == "Let me look.\nBOARDS\nboard" and not parsed.errors
    assert line.expected == "Write one command per line: MOVE: <move> or MOVES or BOARD."
    parsed = line.parse("BOARD: please\nMOVE")
    assert parsed.calls == [] and [e.raw for e in parsed.errors] == ["BOARD: please"]
    assert "'BOARD' takes no value" in parsed.errors[0].message
    assert parsed.content == "MOVE"  # a command with a value needs its 'MOVE:'


@pytest.mark.parametrize(
    "options, problem",
    [
        (None, "needs a 'commands' table"),
        ({}, "needs a 'commands' table"),
        ({"commands": {}}, "non-empty table"),
        ({"commands": {"CALC": {"tool": "c", "argument": "e"}}, "sep": ";"}, "unknown option"),
        ({"commands": {"TWO WORDS": {"tool": "c", "argument": "e"}}}, "without spaces"),
        ({"commands": {"A:B": {"tool": "c", "argument": "e"}}}, "without spaces or ':'"),
        ({"commands": {"CALC": "calculator"}}, "must map to"),
        ({"commands": {"CALC": {"tool": "c", "arg": "e"}}}, "unknown key"),
        ({"commands": {"CALC": {"argument": "e"}}}, "needs 'tool'"),
        ({"commands": {"CALC": {"tool": "c"}}}, "needs 'argument'"),
        ({"commands": {"CALC": {"tool": 3, "argument": "e"}}}, "tool name or null"),
        ({"commands": {"ANSWER": {"tool": None, "argument": "a"}}}, "drop 'argument'"),
    ],
)
def test_line_protocol_options_are_validated(options, problem):
    with pytest.raises(UserError, match="line parser options") as info:
        get_parser("line", options)
    assert problem in str(info.value)
    assert '"CALC"' in str(info.value)  # shows a working example


# -- no input crashes a parser ----------------------------------------------------------------
FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<|python_tag|>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    '{"name": "calculator"',
    '"arguments": ',
    '"parameters": ',
    "{",
    "}",
    "[",
    "]",
    '"',
    ":",
    ";",
    ",",
    "\n",
    " ",
    "Action:",
    "Action Input:",
    "Final Answer:",
    "Observation:",
    "Thought:",
    "CALC:",
    "ANSWER:",
    "SEARCH:",
    "```json",
    "```",
    "null",
    "1e999",
    '"\\u',
    "\\",
    "x",
    "calculator",
    "<|im_end|>",
    "</s>",
    "[" * 50,
    "{" * 30,
]
markup = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=5), max_size=40).map("".join)
KEYWORDS = [
    "",
    "Action:",
    "Action Input:",
    "action input:",
    "Final Answer:",
    "Observation:",
    "Thought:",
    "CALC:",
    "ANSWER:",
    "  SEARCH:",
    "<tool_call>",
    "</tool_call>",
    "[TOOL_CALLS]",
    "<|python_tag|>",
    "<think>",
    "</think>",
]
VALUES = [
    "",
    " ",
    " calculator",
    ' {"expression": "1"}',
    " 2 + 3",
    ' "x"',
    " [1]",
    " {",
    ' {"name": "a", "arguments": {}}',
    ' [{"name": "a"}]',
    "```",
    "\t",
]
lines = st.lists(
    st.tuples(st.sampled_from(KEYWORDS), st.sampled_from(VALUES) | st.text(max_size=4)),
    max_size=12,
).map(lambda rows: "\n".join(key + value for key, value in rows))
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(parsed: ParsedResponse) -> None:
    assert isinstance(parsed, ParsedResponse)
    assert isinstance(parsed.content, str)
    for call in parsed.calls:
        assert isinstance(call, ToolCall) and isinstance(call.name, str) and call.name
        assert isinstance(call.arguments, (dict, str))
    assert all(isinstance(e, ParseError) and e.message for e in parsed.errors)
    # the safety net caught nothing: the format's own code handled the input
    assert not any("could not be parsed" in e.message for e in parsed.errors)
    assert parsed.reasoning is None or isinstance(parsed.reasoning, str)
    assert parsed.answer is None or isinstance(parsed.answer, str)


@pytest.mark.parametrize("name", ["hermes", "llama3_json", "mistral", "react", "line"])
@FUZZ
@given(text=st.text(max_size=200))
def test_fuzz_arbitrary_text(name, text):
    check(parser(name).parse(text))


@pytest.mark.parametrize("name", ["hermes", "llama3_json", "mistral", "react", "line"])
@FUZZ
@given(text=markup)
def test_fuzz_markup_fragments(name, text):
    check(parser(name).parse(text))


@pytest.mark.parametrize("name", ["hermes", "llama3_json", "mistral", "react", "line"])
@FUZZ
@given(text=lines)
def test_fuzz_keyword_lines(name, text):
    check(parser(name).parse(text))


@pytest.mark.parametrize("name", ["hermes", "llama3_json", "mistral", "react", "line"])
def test_deeply_nested_json_does_not_crash(name):
    text = "<tool_call>" + "[" * 100_000 + "</tool_call>" + "{" * 100_000
    check(parser(name).parse(text))
    check(parser(name).parse('<|python_tag|>{"name": "a", "parameters": ' + "[" * 100_000))
    check(parser(name).parse(None))  # type: ignore[arg-type]


def test_a_parser_from_a_file(tmp_path):
    source = tmp_path / "my_format.py"
    source.write_text(
        "from agentfly_cli.chat.parser_output import BaseParser, ParsedResponse, ToolCall\n"
        "class Shout(BaseParser):\n"
        "    name = 'shout'\n"
        "    def parse_body(self, body):\n"
        "        if body.startswith('CALL '):\n"
        "            call = ToolCall('calculator', {'expression': body[5:]})\n"
        "            return ParsedResponse('', [call])\n"
        "        return ParsedResponse(body, [])\n"
        "not_a_parser = 3\n"
    )
    parser = get_parser(f"{source}:Shout")
    parsed = parser.parse("<think>CALL 9</think>CALL 1+2")
    assert [c.arguments for c in parsed.calls] == [{"expression": "1+2"}]
    with pytest.raises(UserError, match="no parse"):
        get_parser(f"{source}:not_a_parser")


# -- strict JSON and bounded raw text (issue 15) ----------------------------------------------
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_are_invalid_json_the_model_reads(value):
    text = f'<tool_call>{{"name": "calculator", "arguments": {{"x": {value}}}}}</tool_call>'
    parsed = parser("hermes").parse(text)
    assert parsed.calls == []
    assert "invalid JSON" in parsed.errors[0].message
    assert value.lstrip("-") in parsed.errors[0].message
    react = parser("react").parse(f'Action: calculator\nAction Input: {{"x": {value}}}')
    assert react.calls[0].arguments == f'{{"x": {value}}}'  # kept as text, never a float nan


def test_items_of_a_list_of_calls_keep_their_own_raw_text():
    text = '<tool_call>[{"name": "a"}, {"name": "b", "arguments": {"x": 1}}, 7]</tool_call>'
    parsed = parser("hermes").parse(text)
    assert [c.raw for c in parsed.calls] == ['{"name":"a"}', '{"name":"b","arguments":{"x":1}}']
    assert parsed.errors[0].raw == "7"


def test_llama3_broken_call_is_one_error_and_a_later_call_still_runs():
    text = '{"name": "a", "parameters": {"x": oops}} then {"name": "b", "parameters": {}}'
    parsed = parser("llama3_json").parse(text)
    assert calls(parsed) == [("b", {})]
    assert len(parsed.errors) == 1 and parsed.errors[0].raw == '{"name": "a", "parameters": {"x": o'


def test_arguments_nested_too_deeply_are_an_error_not_a_call():
    deep = "[" * 150 + "]" * 150
    text = f'<tool_call>{{"name": "a", "arguments": {{"x": {deep}}}}}</tool_call>'
    parsed = parser("hermes").parse(text)
    assert parsed.calls == [] and "nest more than 100 levels" in parsed.errors[0].message
    shallow = "[" * 90 + "]" * 90
    ok = parser("hermes").parse(text.replace(deep, shallow))
    assert len(ok.calls) == 1 and not ok.errors
