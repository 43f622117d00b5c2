"""Every parser stays linear on adversarial turns of 100 kB to 1 MB: no stall, no crash, no
memory blow-up. Each parse runs in a child process under a time cap (see parse_timing)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from agentfly_cli.chat.formats.json_extent import value_end
from agentfly_cli.chat.parser_output import strip_fence, strip_trailing_markers
from tests.helpers.parse_timing import ParseClock

PARSERS = ["hermes", "llama3_json", "mistral", "react", "line", "harmony", "pythonic"]
PARSERS += ["deepseek_v3", "qwen3_coder"]
SECONDS = 2.0  # CPU seconds: a linear parse of 1 MB takes at most 0.7 s here, quadratic ones 3+
KB = 1000


@pytest.fixture(scope="module")
def clock():
    clock = ParseClock()
    yield clock
    clock.close()


def check_bounded(clock: ParseClock, name: str, text: str, seconds: float = SECONDS) -> None:
    cap = max(15.0, 4 * seconds)  # wall clock, for a stall; the bound below is CPU time
    outcome = clock.parse(name, text, cap=cap)
    assert outcome is not None, f"{name} did not parse {len(text):,} chars in {cap:g}s"
    assert outcome.seconds < seconds, f"{name} took {outcome.seconds:.2f}s on {len(text):,} chars"
    assert outcome.names_ok and outcome.messages_ok
    # what calls and errors keep of the text is linear in it (each raw is a distinct span)
    assert outcome.raw_chars <= 2 * len(text) + 100, f"{name} kept {outcome.raw_chars:,} chars"
    assert outcome.content_chars <= len(text)


# -- the super-linear paths found in issue 15, each at a size that stalled before ------------------
FENCED_NEWLINES = "<tool_call>```\n" + "\n" * (100 * KB) + "x</tool_call>"
NESTED_NAMES = '{"name": ' * (1000 * KB // 9)
KNOWN = {
    "fenced <tool_call> of newlines (regex backtracking in the fence stripper)": (
        "hermes",
        FENCED_NEWLINES,
    ),
    "blank lines in a fence": ("hermes", "<tool_call>```" + " \n" * (50 * KB) + "</tool_call>"),
    "nested llama3 call starts (one decode per start)": ("llama3_json", NESTED_NAMES),
    "fence after <|python_tag|>": ("llama3_json", "<|python_tag|>```" + "\n" * (100 * KB)),
    "fenced Action Input": ("react", "Action: a\nAction Input: ```\n" + "\n" * (100 * KB)),
    "stray </tool_call> tags (a search to the end per tag)": (
        "hermes",
        "</tool_call>" * (1000 * KB // 12),
    ),
    "repeated end-of-turn markers (a copy per marker)": ("hermes", "x" + "<|im_end|> " * 200_000),
    "think blocks (a copy per block)": ("mistral", "<think>a</think>b" * 150_000),
}


@pytest.mark.parametrize("case", list(KNOWN))
def test_known_super_linear_inputs_parse_in_linear_time(clock, case):
    name, text = KNOWN[case]
    check_bounded(clock, name, text, seconds=1.0)


def test_llama3_nested_starts_are_one_error_not_one_per_start(clock):
    outcome = clock.parse("llama3_json", NESTED_NAMES, cap=10)
    assert outcome is not None and outcome.errors == 1 and outcome.calls == 0


# -- property tests: large adversarial turns for every parser ---------------------------------
FRAGMENTS = [
    "<tool_call>", "</tool_call>", "```", "```json\n", "\n", "\n\n", " ", "\t", "[", "]", "{",
    "}", '{"name": ', '"name"', ':', '"arguments": ', '"parameters": {', '"calculator"',
    "NaN", "Infinity", "-Infinity", "1e999", "\ud800", "\udfff", '"\\ud800"', "\\", '"',
    "<think>", "</think>", "<|im_end|>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<|python_tag|>",
    ";", ",", "Action:", "Action Input:", "Thought:", "Final Answer:", "Observation:", "CALC:",
    "ANSWER:", "CALC: 1", "x", "calculator",
]  # fmt: skip

piece = st.sampled_from(FRAGMENTS) | st.text(max_size=6)


@st.composite
def adversarial_turns(draw) -> tuple[str, str, int, str]:
    """A short head, one unit repeated to 100 kB - 1 MB, and a short tail (built by ``turn``, so
    that a failing example prints short)."""
    head = "".join(draw(st.lists(piece, max_size=4)))
    unit = "".join(draw(st.lists(piece, min_size=1, max_size=6))) or "x"
    tail = "".join(draw(st.lists(piece, max_size=4)))
    return head, unit, draw(st.integers(100 * KB, 1000 * KB)), tail


def turn(shape: tuple[str, str, int, str]) -> str:
    head, unit, size, tail = shape
    return head + unit * (size // len(unit) + 1) + tail


@pytest.mark.parametrize("name", PARSERS)
@settings(
    max_examples=5,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(shape=adversarial_turns())
@example(shape=("<tool_call>```\n", "\n", 100 * KB, "x</tool_call>"))
@example(shape=("", '{"name": ', 1000 * KB, ""))
@example(shape=("<tool_call>", "[", 500 * KB, "</tool_call>"))
@example(shape=("", "<tool_call>", 1000 * KB, ""))
@example(
    shape=("", '<tool_call>{"name": "a", "arguments": {"x": NaN}}</tool_call>\n', 500 * KB, "")
)
@example(shape=("<tool_call>```json\n", "\ud800\n", 200 * KB, ""))
@example(shape=("Action: a\nAction Input: ```\n", "\n", 100 * KB, ""))
@example(shape=("", "CALC: 1\n", 1000 * KB, ""))
@example(shape=("ANSWER: 1", "<|im_end|>\n", 1000 * KB, ""))
@example(shape=("[TOOL_CALLS][", '{"name":"a"},', 300 * KB, '{"name":"a"}]'))
def test_every_parser_is_linear_on_large_adversarial_turns(clock, name, shape):
    check_bounded(clock, name, turn(shape))


# -- the linear helpers agree with what they replaced ----------------------------------------------
_OLD_FENCE = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=" \n\t`aj{}1-", max_size=24))
def test_strip_fence_agrees_with_the_old_regex_on_small_texts(text):
    match = _OLD_FENCE.match(text)
    assert strip_fence(text) == (match.group(1) if match else text).strip()


def _old_strip_trailing_markers(text: str) -> str:
    markers = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>", "</s>")
    markers += ("<end_of_turn>", "<|end|>")
    while True:
        stripped = text.rstrip()
        for marker in markers:
            if stripped.endswith(marker):
                text = stripped[: -len(marker)]
                break
        else:
            return text


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["<|im_end|>", "</s>", " ", "\n", "x", "<|end|>", "s>"])))
def test_strip_trailing_markers_agrees_with_the_old_loop(pieces):
    text = "".join(pieces)
    assert strip_trailing_markers(text) == _old_strip_trailing_markers(text)


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ('{"a": [1, {"b": "}"}]} tail', 0, 22),
        ('x {"a": "\\"}"} y', 2, 14),
        ('{"a": [', 0, 7),
        ("[[[]]", 1, 5),
        ("abc", 1, 2),
        ("", 0, 0),
    ],
)
def test_value_end_respects_strings_and_escapes(text, start, end):
    assert value_end(text, start) == end
