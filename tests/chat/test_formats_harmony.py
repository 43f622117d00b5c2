"""gpt-oss harmony: the parser, the packaged template, and token-exact multi-turn tool use on the
real o200k_harmony tokenizer (two sampled turn ends, <|call|> and <|return|>; history writes a
final answer's end as <|end|> and drops reasoning before the last final answer)."""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from agentfly_cli.chat.formats.harmony import HarmonyParser, read_header
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.cli.app import build_app
from tests.helpers.parse_timing import ParseClock
from tests.helpers.realdata_paths import real_tokenizer

# The spec's ids (openai/harmony docs/format.md), which the real tokenizer must give.
IDS = {"<|start|>": 200006, "<|end|>": 200007, "<|message|>": 200008, "<|channel|>": 200005,
       "<|constrain|>": 200003, "<|return|>": 200002, "<|call|>": 200012}  # fmt: skip
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. 2 + 3"}},
                "required": ["expression"],
            },
        },
    }
]
MESSAGES = [
    {"role": "system", "content": "You are a careful calculator agent."},
    {"role": "user", "content": "What is 17 * 23?"},
]


def call_text(expression: str, thought: str = "") -> str:
    """A sampled tool-call turn in the template's own form (the prompt opened the first
    message with <|start|>assistant)."""
    head = f"<|channel|>analysis<|message|>{thought}<|end|><|start|>assistant" if thought else ""
    arguments = json.dumps({"expression": expression}, separators=(",", ":"))
    return (
        f"{head}<|channel|>commentary to=functions.calculator <|constrain|>json<|message|>"
        f"{arguments}<|call|>"
    )


def call_message(expression: str, thought: str = "") -> dict:
    message = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "calculator",
                                          "arguments": {"expression": expression}}}]}  # fmt: skip
    if thought:
        message["reasoning_content"] = thought
    return message


@pytest.fixture(scope="module")
def chat() -> ChatTemplate:
    return ChatTemplate.load(real_tokenizer("gpt_oss"), "harmony")


def parse(text: str):
    return HarmonyParser().parse(text)


# -- the parser -------------------------------------------------------------------------------
def test_a_call_after_analysis():
    parsed = parse(call_text("2 + 3", "Need the calculator."))
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        ("calculator", {"expression": "2 + 3"})
    ]
    assert parsed.reasoning == "Need the calculator." and parsed.content == ""
    assert parsed.errors == [] and parsed.calls[0].raw.endswith("<|call|>")


def test_a_final_answer_with_reasoning():
    parsed = parse("<|channel|>analysis<|message|>Simple.<|end|>"
                   "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>")  # fmt: skip
    assert (parsed.content, parsed.reasoning, parsed.calls, parsed.errors) == (
        "2 + 2 = 4.", "Simple.", [], [])  # fmt: skip


def test_several_calls_a_preamble_and_both_header_orders():
    text = (
        "<|channel|>commentary<|message|>Plan: two lookups.<|end|>"
        '<|start|>assistant<|channel|>commentary to=functions.a<|constrain|>json<|message|>{"x":1}'
        '<|call|><|start|>assistant to=functions.b<|channel|>commentary json<|message|>{"y": [2]}'
    )
    parsed = parse(text)
    assert [(c.name, c.arguments) for c in parsed.calls] == [("a", {"x": 1}), ("b", {"y": [2]})]
    assert parsed.content == "Plan: two lookups." and parsed.errors == []
    assert read_header(" to=functions.b<|channel|>commentary json", "assistant").recipient == (
        "functions.b"
    )


def test_plain_text_without_markup_is_content_and_think_tags_are_text():
    assert parse("Just an answer.").content == "Just an answer."
    parsed = parse("<|channel|>final<|message|>a <think>b</think> c")
    assert parsed.content == "a <think>b</think> c" and parsed.reasoning is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": NaN}', "NaN"),
        ("<|channel|>commentary to=functions.f<|message|>{not json", "invalid JSON"),
        ("<|channel|>commentary to=functions.f<|message|>[1, 2]", "must be a JSON object"),
        ("<|channel|>commentary to=python<|message|>print(1)", "'python', which is not"),
        ("<|channel|>commentary to=functions.<|message|>{}", "which is not one of"),
        ("<|channel|>final", "without <|message|>"),
        ("<|channel|>finale<|message|>hi", "unknown channel 'finale'"),
        ("<|channel|>final<|message|>hi<|end|>stray", "text after the end of a message"),
        ("<|channel|>analysis<|message|>thinking only", "no final answer and no tool call"),
        ('<|channel|>commentary to=functions.f<|message|>{"a":' + "[" * 5000, "invalid JSON"),
    ],
)
def test_malformed_markup_is_a_parse_error_that_shows_the_format(text, says):
    parsed = parse(text)
    assert parsed.calls == [] and len(parsed.errors) >= 1
    message = " ".join(e.message for e in parsed.errors)
    assert says in message and "to=functions.<tool name>" in message and "<|call|>" in message


def test_an_imagined_tool_result_stops_the_turn_and_earlier_calls_survive():
    text = call_text("1 + 1") + (
        "<|start|>functions.calculator to=assistant<|channel|>commentary<|message|>2<|end|>"
        "<|start|>assistant<|channel|>final<|message|>It is 2."
    )
    parsed = parse(text)
    assert [c.name for c in parsed.calls] == ["calculator"] and parsed.content == ""
    [error] = parsed.errors
    assert "message from 'functions.calculator'" in error.message


def test_lone_surrogates_and_strings_in_arguments():
    parsed = parse('<|channel|>commentary to=functions.f<|message|>{"a": "\\ud800"}<|call|>')
    assert parsed.calls[0].arguments == {"a": "\ud800"}
    parsed = parse("<|channel|>final<|message|>bad \ud800 text")
    assert parsed.content == "bad \ud800 text" and parsed.errors == []
    parsed = parse('<|channel|>commentary to=functions.f<|message|>"2 + 3"<|call|>')
    assert parsed.calls[0].arguments == "2 + 3"  # a one-argument tool gets it as that argument


@pytest.fixture(scope="module")
def clock():
    clock = ParseClock()
    yield clock
    clock.close()


MB = 1_000_000
LARGE = {
    "starts": "<|start|>" * (MB // 9),
    "one long analysis": "<|channel|>analysis<|message|>" + "x" * MB,
    "headers without a message": "<|start|>x" * (MB // 10),
    "NaN calls": '<|start|>assistant<|channel|>commentary to=functions.f<|message|>{"a": NaN}'
    * (MB // 70),
    "calls": "<|start|>assistant<|channel|>commentary to=functions.f<|message|>{}<|call|>"
    * (MB // 70),
    "messages": "<|message|>" * (MB // 11),
    "channels": "<|channel|>" * (MB // 11),
    "recipients": "to=functions.f " * (MB // 15) + "<|message|>{}",
    "deep JSON": "<|channel|>commentary to=functions.f<|message|>" + '{"a":' * (MB // 5),
    "surrogates": "<|channel|>final<|message|>" + "\ud800" * MB,
}


@pytest.mark.parametrize("case", list(LARGE))
def test_large_adversarial_turns_parse_in_linear_time(clock, case):
    text = LARGE[case]
    outcome = clock.parse("harmony", text, cap=15.0)
    assert outcome is not None, f"no result in 15 s on {case}"
    assert outcome.seconds < 2.0, f"{outcome.seconds:.2f}s on {case}"
    assert outcome.names_ok and outcome.messages_ok
    assert outcome.raw_chars <= 2 * len(text) + 100 and outcome.content_chars <= len(text)


# -- the template on the real tokenizer -------------------------------------------------------
def test_the_real_tokenizer_has_the_specs_ids(chat):
    assert {token: chat.encode_text(token) for token in IDS} == {t: [i] for t, i in IDS.items()}
    # the spec's example: "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>"
    assert chat.encode_text("<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>")[
        -10:
    ] == [200008, 17, 659, 220, 17, 314, 220, 19, 13, 200002]


def test_stop_ids_are_call_and_return_never_end(chat):
    assert chat.eot_token_ids == [IDS["<|return|>"], IDS["<|call|>"]]
    assert chat.history_end == "<|end|>" and chat.default_parser == "harmony"
    assert chat.encode_response("<|channel|>final<|message|>Hi")[-1] == IDS["<|return|>"]
    assert chat.encode_response(call_text("1"))[-1] == IDS["<|call|>"]  # kept, not doubled
    assert chat.encode_response(call_text("1")).count(IDS["<|call|>"]) == 1


def test_prompt_declares_the_tools_in_the_developer_message(chat):
    text = chat.decode(chat.render_prompt(MESSAGES, TOOLS))
    assert text.startswith("<|start|>system<|message|>You are ChatGPT")
    assert "Calls to these tools must go to the commentary channel: 'functions'.<|end|>" in text
    assert (
        "<|start|>developer<|message|># Instructions\n\nYou are a careful calculator agent.\n\n"
        "# Tools\n\n## functions\n\nnamespace functions {\n\n"
        "// Evaluate an arithmetic expression.\ntype calculator = (_: {\n// e.g. 2 + 3\n"
        "expression: string,\n}) => any;\n\n} // namespace functions<|end|>"
    ) in text
    assert text.endswith("<|start|>user<|message|>What is 17 * 23?<|end|><|start|>assistant")


@pytest.mark.parametrize(
    "message",
    [
        call_message("17 * 23", "Use the calculator."),
        {"role": "assistant", "content": "It is 391.", "reasoning_content": "Done."},
        {
            "role": "assistant",
            "content": "Two checks.",
            "tool_calls": [
                {"function": {"name": "a", "arguments": {"x": [1, 2.5, None, True, 'é"\\']}}},
                {"function": {"name": "b", "arguments": {}}},
            ],
        },
    ],  # fmt: skip
    ids=["call", "final", "preamble-and-two-calls"],
)
def test_the_parser_reads_back_what_the_template_writes(chat, message):
    prompt = chat.render_text(MESSAGES, TOOLS, add_generation_prompt=True)
    turn = chat.render_text([*MESSAGES, message], TOOLS)[len(prompt) :]
    parsed = get_parser("harmony").parse(turn)
    calls = [c.get("function", c) for c in message.get("tool_calls", [])]
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        (c["name"], c["arguments"]) for c in calls
    ]
    assert parsed.content == message["content"] and parsed.errors == []
    assert parsed.reasoning == message.get("reasoning_content")


def test_the_observation_delta_is_exact(chat):
    results = chat.observation_messages([("calculator", "c0", "42")])
    delta = chat.observation_delta(results, TOOLS)
    text = "<|start|>functions.calculator to=assistant<|channel|>commentary<|message|>42<|end|>"
    assert chat.decode(delta) == text + "<|start|>assistant"
    assert delta == chat.encode_text(text + "<|start|>assistant")
    assert delta[0] == IDS["<|start|>"] and delta[-3:] == [IDS["<|end|>"], IDS["<|start|>"], 173781]
    two = chat.observation_messages([("calculator", "c1", "1"), (None, None, "bad call")])
    assert chat.decode(chat.observation_delta(two, TOOLS)).count("to=assistant") == 2
    # a turn cut by another stop token is closed as history closes it: <|end|>, never <|return|>
    assert chat.observation_delta(results, TOOLS, closed=False) == [IDS["<|end|>"], *delta]


def test_each_stage_of_a_multi_turn_rollout_is_what_the_template_renders(chat):
    """prompt + sampled ids + deltas == the template's rendering of every stage; at the end the
    template drops the reasoning of the turns before the final answer, nothing else."""
    turns = [("17 * 23", "Use the calculator.", "391"), ("391 - 1", "Check it.", "390")]
    ids, mask, stage = chat.render_prompt(MESSAGES, TOOLS), [], list(MESSAGES)
    mask = [0] * len(ids)
    for expression, thought, result in turns:
        sampled = chat.encode_response(call_text(expression, thought))
        assert sampled[-1] == IDS["<|call|>"]
        stage += [call_message(expression, thought), {"role": "tool", "name": "calculator",
                                                      "content": result}]  # fmt: skip
        delta = chat.observation_delta(chat.observation_messages([("calculator", "", result)]))
        ids, mask = ids + sampled + delta, mask + [1] * len(sampled) + [0] * len(delta)
        rendered = chat.encode_text(chat.render_text(stage, TOOLS, add_generation_prompt=True))
        assert ids == rendered
    final = "<|channel|>analysis<|message|>Both agree.<|end|>" \
            "<|start|>assistant<|channel|>final<|message|>391"  # fmt: skip
    sampled = chat.encode_response(final)
    ids, mask = ids + sampled, mask + [1] * len(sampled)
    assert ids[-1] == IDS["<|return|>"]
    stage.append({"role": "assistant", "content": "391", "reasoning_content": "Both agree."})
    whole = chat.render_text(stage, TOOLS)
    ours = chat.decode(ids)
    for _, thought, _ in turns:  # the only difference: earlier analysis dropped
        ours = ours.replace(f"<|channel|>analysis<|message|>{thought}<|end|><|start|>assistant", "")
    assert whole == ours and whole.endswith("<|channel|>final<|message|>391<|return|>")


def test_a_scripted_rollout_is_token_exact(chat):
    from agentfly_cli.backends.scripted import ScriptedBackend
    from agentfly_cli.rollout.engine import RolloutEngine
    from agentfly_cli.settings.rollout import RolloutSettings
    from rewards_builtin.text import math_equal
    from tools_builtin.calculator import calculator

    script = [[call_text("17 * 23", "Use the calculator."), call_text("391 - 1", "Check."),
               "<|channel|>analysis<|message|>Agreed.<|end|>"
               "<|start|>assistant<|channel|>final<|message|>391"]]  # fmt: skip
    engine = RolloutEngine(ScriptedBackend(script, chat), chat, get_parser("harmony"),
                           [calculator], math_equal, RolloutSettings(n=2, max_turns=5))  # fmt: skip
    assert set(engine._stop_ids) == {IDS["<|return|>"], IDS["<|call|>"]}
    trajectories = asyncio.run(engine.run([{"question": "What is 17 * 23?", "answer": "391"}]))
    for trajectory in trajectories:
        trajectory.check()  # ids[loss_mask] == every sampled id, in order
        trained = [i for i, m in zip(trajectory.ids, trajectory.loss_mask, strict=True) if m]
        assert trained == [i for text in script[0] for i in chat.encode_response(text)]
        assert [c.observation for c in trajectory.tool_calls] == ["391", "390"]
        assert (trajectory.finish_reason, trajectory.prediction) == ("answer", "391")
        assert trajectory.reward == 1.0
        ends = [t.sampled_ids[-1] for t in trajectory.turns if t.role == "assistant"]
        assert ends == [IDS["<|call|>"], IDS["<|call|>"], IDS["<|return|>"]]


def test_only_harmonys_return_gets_other_turn_ends(chat):
    """A template ending turns with <|end|> (Phi-3 style) keeps one end-of-turn token."""
    template = (
        "{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>"
        "{% endfor %}{% if add_generation_prompt %}<|start|>assistant<|message|>{% endif %}"
    )
    other = ChatTemplate.load(chat.tokenizer, template)
    assert other.eot_token_ids == [IDS["<|end|>"], IDS["<|return|>"]]  # eos after, as before
    assert other.history_end is None


# -- the doctor -------------------------------------------------------------------------------
def test_doctor_verdicts_on_gpt_oss_with_the_harmony_template():
    folder = str(real_tokenizer("gpt_oss"))
    args = ["doctor", folder, "--template", "harmony", "--parser", "harmony", "--json"]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    verdicts = {row["check"]: row for row in json.loads(result.output)}
    assert [row["status"] for row in verdicts.values()] == ["pass", "pass", "pass", "warn", "pass"]
    assert (
        "'<|return|>' (id 200002); sampling also stops at '<|call|>'"
        in (verdicts["end of turn"]["detail"])
    )
    deltas = verdicts["observation deltas"]["detail"]
    assert deltas.startswith("after a user message,")  # tool results are exact
    assert "writes a sampled <|return|> as <|end|>" in deltas
    human = CliRunner().invoke(build_app(), args[:-1])
    assert human.exit_code == 0 and "WARN" in human.output
