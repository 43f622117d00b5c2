"""Pythonic tool calls (Llama 3.2 / 4 style): the parser (ast, never eval; the whole reply is
the call list, as vLLM documents), the packaged template, and token-exact round trips on the real
Qwen3 and SmolLM2 tokenizers."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from agentfly_cli.chat.formats.pythonic import MAX_CHARS, PythonicParser
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.sources import guess_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.cli.app import build_app
from tests.chat.test_chat_templates import (
    MESSAGES,
    TOOLS,
    assert_mask_invariant,
    assert_matches_full_render,
    simulate,
)
from tests.helpers.parse_timing import ParseClock
from tests.helpers.realdata_paths import real_tokenizer

EXPECTED = '[tool_name(argument="value", count=2)]'  # the form every error message shows


def parse(text: str):
    return PythonicParser().parse(text)


def calls(text: str) -> list[tuple[str, object]]:
    return [(c.name, c.arguments) for c in parse(text).calls]


# -- the parser -------------------------------------------------------------------------------
def test_several_calls_with_literal_values():
    text = (
        '[get_weather(city="Paris", days=3), other(x=1.5, flag=True, none=None, '
        "items=[1, -2, (3, 4)], nested={'a': {'b': [False]}}, json=[true, false, null]), ping()]"
    )
    assert calls(text) == [
        ("get_weather", {"city": "Paris", "days": 3}),
        ("other", {"x": 1.5, "flag": True, "none": None, "items": [1, -2, [3, 4]],
                   "nested": {"a": {"b": [False]}}, "json": [True, False, None]}),
        ("ping", {}),
    ]  # fmt: skip
    parsed = parse(text)
    assert parsed.content == "" and parsed.errors == []
    assert parsed.calls[0].raw == 'get_weather(city="Paris", days=3)'  # its own text
    # every recorded call writes back as standard JSON
    assert json.loads(json.dumps([c.arguments for c in parsed.calls], allow_nan=False))


def test_wrappers_fences_think_blocks_and_dotted_names():
    assert calls("```python\n[f(a=1)]\n```") == [("f", {"a": 1})]
    assert calls("<|python_start|>[a.b(x='é\\n')]<|python_end|>") == [("a.b", {"x": "é\n"})]
    assert calls("<|python_tag|>[f(a=1)]<|eot_id|>") == [("f", {"a": 1})]
    parsed = parse("<think>I should call f.</think>\n[f(\n  a=1,\n)]")
    assert parsed.reasoning == "I should call f." and [c.name for c in parsed.calls] == ["f"]


@pytest.mark.parametrize(
    "text", ["The answer is 42.", "[1, 2, 3]", "[]", "[see above]", "['a', 'b']", "[x]"]
)
def test_replies_that_are_not_call_lists_are_content(text):
    parsed = parse(text)
    assert (parsed.content, parsed.calls, parsed.errors) == (text, [], [])


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[f(1)]", "f() got a positional argument (1); pass every argument by keyword"),
        ("[f(x=g(1))]", "the value of 'x' in f() must be a literal: g(1) is not a literal"),
        ("[f(x=y)]", "y is not a literal"),
        ("[f(x=1 + 2)]", "1 + 2 is not a literal"),
        ("[f(x=float('nan'))]", "float('nan') is not a literal"),
        ("[f(x=1e999)]", "too large for JSON"),
        ("[f(x=1j)]", "is a complex, not a JSON value"),
        ("[f(x=b'a')]", "is a bytes, not a JSON value"),
        ("[f(x={1: 2})]", "the dict key 1 is not a string"),
        ("[f(x={**d})]", "**d unpacks a value"),
        ("[f(**kwargs)]", "f() unpacks **kwargs"),
        ("[f(a=1, a=2)]", "f() repeats the argument 'a'"),
        ("[f(a=1), 3]", "the list holds 3, which is not a call"),
        ("[f(a=1)(b=2)]", "f(a=1) is not a tool name"),
        ('[f(a="x)]', "not valid Python (unterminated string literal"),
        ("[f(a=1)", "not closed with ]"),
        ("[f(a=1)][g(b=2)]", "not one python list of calls"),
        ('Let me check.\n[get_weather(city="Paris")]', "must be the whole reply"),
        ('[get_weather(city="Paris")]\nDone.', "must be the whole reply"),
        ("[f(x=" + "[" * 150 + "]" * 150 + ")]", "nest more than 100 levels deep"),
        ("[f(x=" + "[" * 300 + "]" * 300 + ")]", "too many nested parentheses"),
        ("[f(x=" + "-" * 100_000 + "1)]", "nested too deeply"),
        ("[f(x=1" + " + 1" * 40_000 + ")]", "nested too deeply"),
        ("[f(x=[" + "1, " * 60_000 + "])]", "too long to read"),
    ],
)
def test_bad_calls_are_parse_errors_that_show_the_expected_form(text, says):
    parsed = parse(text)
    assert parsed.errors, parsed
    message = " ".join(e.message for e in parsed.errors)
    assert says in message and EXPECTED in message


def test_good_calls_survive_a_bad_one_and_lone_surrogates_are_kept():
    parsed = parse('[f(a=1), g(2), h(s="\ud800", t="\\udfff")]')
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        ("f", {"a": 1}),
        ("h", {"s": "\ud800", "t": "\udfff"}),
    ]
    assert len(parsed.errors) == 1 and "g() got a positional argument" in parsed.errors[0].message


def test_the_text_is_never_evaluated():
    parsed = parse("[f(x=__import__('os').system('echo pwned'))]")
    assert parsed.calls == [] and "is not a literal" in parsed.errors[0].message


@pytest.fixture(scope="module")
def clock():
    clock = ParseClock()
    yield clock
    clock.close()


MB = 1_000_000
LARGE = {
    "calls": "[" + "f(x=1), " * (MB // 8) + "]",
    "calls under the size cap": "[" + "f(x=1), " * (MAX_CHARS // 16) + "]",
    "open brackets": "[" * MB,
    "nested calls": "[a(" * (MB // 3) + ")]",
    "comparisons under the size cap": "[f(x=1" + "<1" * (MAX_CHARS // 2 - 10) + ")]",
    "one long string": '[f(x="' + "a" * MB + '")]',
    "embedded openers": "text [f(x=" * (MB // 10),
    "fenced newlines": "```python\n" + "\n" * MB,
    "NaN": "[f(x=NaN)]" * (MB // 10),
    "surrogates": '[f(x="' + "\ud800" * (MB // 2) + '")]',
}


@pytest.mark.parametrize("case", list(LARGE))
def test_large_adversarial_turns_parse_in_linear_time(clock, case):
    text = LARGE[case]
    outcome = clock.parse("pythonic", text, cap=15.0)
    assert outcome is not None, f"no result in 15 s on {case}"
    assert outcome.seconds < 2.0, f"{outcome.seconds:.2f}s on {case}"
    assert outcome.names_ok and outcome.messages_ok
    assert outcome.raw_chars <= 2 * len(text) + 100 and outcome.content_chars <= len(text)


# -- the template on real tokenizers ----------------------------------------------------------
@pytest.fixture(scope="module", params=["qwen3", "smollm2"])
def chat(request) -> ChatTemplate:
    return ChatTemplate.load(real_tokenizer(request.param), "pythonic")


CALL_1 = '[calculator(expression="12 + 30")]'
CALL_2 = '[calculator(expression="6 * 7"), calculator(expression="12 + 30")]'


def call_message(*expressions: str) -> dict:
    functions = [{"name": "calculator", "arguments": {"expression": e}} for e in expressions]
    calls = [{"type": "function", "function": f} for f in functions]
    return {"role": "assistant", "content": "", "tool_calls": calls}


def test_the_template_lists_the_tools_and_is_recognised(chat):
    assert chat.eot_token_ids[0] == chat.tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert chat.default_parser == "pythonic"
    text = chat.render_text(MESSAGES, TOOLS, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nYou are a careful calculator agent.\n\n# Tools")
    assert json.dumps(TOOLS[0]["function"], ensure_ascii=False) in text
    assert EXPECTED[:-1] in text and text.endswith("<|im_start|>assistant\n")
    llama32 = "[func_name1(params_name1=params_value1, params_name2=params_value2...)]"
    assert guess_parser("{# ipython #}" + llama32) == "pythonic"


@pytest.mark.parametrize(
    "arguments",
    [
        {"expression": "12 + 30"},
        {"s": 'quote " backslash \\ newline \n tab \t é 中 🙂', "n": -3, "f": 2.5e-7},
        {"flags": [True, False, None], "deep": {"k": [{"v": 1}, []]}, "empty": {}},
    ],
)
def test_the_parser_reads_back_what_the_template_writes(chat, arguments):
    message = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "tool_a", "arguments": arguments}},
        {"function": {"name": "tool_b", "arguments": {}}}]}  # fmt: skip
    prompt = chat.render_text(MESSAGES, TOOLS, add_generation_prompt=True)
    turn = chat.render_text([*MESSAGES, message], TOOLS)[len(prompt) :]
    assert turn.endswith("<|im_end|>\n")
    parsed = get_parser("pythonic").parse(turn[: -len("\n")])
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        ("tool_a", arguments),
        ("tool_b", {}),
    ]
    assert parsed.errors == [] and parsed.content == ""


def test_a_multi_turn_trajectory_is_token_exact(chat):
    turns = [
        (CALL_1, [("calculator", "call_0", "42")]),
        (CALL_2, [("calculator", "call_1", "42"), ("calculator", "call_2", "42")]),
        ("Both are 42.", None),
    ]
    run = simulate(chat, MESSAGES, turns)
    assert_mask_invariant(run)
    assert_matches_full_render(chat, run)  # the template is prefix-preserving
    assert chat.decode(run.deltas[0]) == "\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n"
    assert chat.decode(run.deltas[1]).count("<|im_start|>tool\n42<|im_end|>") == 2
    # the same conversation with structured tool calls renders to the very same ids
    structured = [*MESSAGES, call_message("12 + 30"), run.conversation[3],
                  call_message("6 * 7", "12 + 30"), *run.conversation[5:]]  # fmt: skip
    assert chat.encode_text(chat.render_text(structured, TOOLS))[: len(run.ids)] == run.ids


def test_a_scripted_rollout_is_token_exact(chat):
    from agentfly_cli.backends.scripted import ScriptedBackend
    from agentfly_cli.rollout.engine import RolloutEngine
    from agentfly_cli.settings.rollout import RolloutSettings
    from rewards_builtin.text import math_equal
    from tools_builtin.answer import answer
    from tools_builtin.calculator import calculator

    script = [['[calculator(expression="17 * 23")]',
               '[calculator(expression="391 - 1"), calculator(expression="391 + 0")]',
               '[answer(answer="391")]']]  # fmt: skip
    settings = RolloutSettings(n=2, max_turns=5)
    engine = RolloutEngine(ScriptedBackend(script, chat), chat, get_parser("pythonic"),
                           [calculator, answer], math_equal, settings)  # fmt: skip
    for trajectory in asyncio.run(engine.run([{"question": "17 * 23?", "answer": "391"}])):
        trajectory.check()  # ids[loss_mask] == every sampled id, in order
        trained = [i for i, m in zip(trajectory.ids, trajectory.loss_mask, strict=True) if m]
        assert trained == [i for text in script[0] for i in chat.encode_response(text)]
        assert [c.observation for c in trajectory.tool_calls] == ["391", "390", "391", "391"]
        assert (trajectory.finish_reason, trajectory.reward) == ("terminal_tool", 1.0)


def test_doctor_passes_the_pythonic_template_on_smollm2():
    folder = str(real_tokenizer("smollm2"))
    result = CliRunner().invoke(build_app(), ["doctor", folder, "--template", "pythonic", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [row["status"] for row in rows] == ["pass"] * 5
    assert rows[-1]["check"] == "parser pythonic reads the template's calls"
