"""DeepSeek-V3 tool calls: the parser, its round trip through the real DeepSeek-V3 template and
tokenizer, the tokenizer that transformers 5 breaks (and the loader that fixes it), and the
doctor's verdicts on that folder."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from typer.testing import CliRunner

from agentfly_cli.chat.formats.deepseek import (
    CALL_BEGIN,
    CALL_END,
    CALLS_BEGIN,
    CALLS_END,
    EOS,
    SEP,
    DeepSeekV3Parser,
)
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.chat.tokenizer_loading import SUBSTITUTED, load_tokenizer, round_trip_loss
from agentfly_cli.cli.app import build_app
from agentfly_cli.errors import UserError
from tests.chat.test_chat_templates import (
    MESSAGES,
    TOOLS,
    assert_mask_invariant,
    assert_matches_full_render,
    simulate,
)
from tests.chat.test_parser_limits import check_bounded
from tests.helpers.parse_timing import ParseClock
from tests.helpers.realdata_paths import real_tokenizer

PARSER = DeepSeekV3Parser()


def v3(name: str, arguments: dict) -> str:
    """One call as DeepSeek-V3's template writes it (json.dumps spacing)."""
    return f"{CALL_BEGIN}function{SEP}{name}\n```json\n{json.dumps(arguments)}\n```{CALL_END}"


def v31(name: str, arguments: dict) -> str:
    return f"{CALL_BEGIN}{name}{SEP}{json.dumps(arguments)}{CALL_END}"


def turn(*calls: str, content: str = "") -> str:
    return content + CALLS_BEGIN + "\n".join(calls) + CALLS_END


def calls(parsed) -> list[tuple[str, object]]:
    return [(c.name, c.arguments) for c in parsed.calls]


# -- the format -------------------------------------------------------------------------------
def test_one_call_and_the_content_before_it():
    parsed = PARSER.parse(turn(v3("calculator", {"expression": "2 + 3"}), content="Let me add."))
    assert calls(parsed) == [("calculator", {"expression": "2 + 3"})]
    assert parsed.content == "Let me add." and not parsed.errors and parsed.reasoning is None
    assert parsed.calls[0].raw.startswith(CALL_BEGIN) and parsed.calls[0].raw.endswith(CALL_END)


def test_several_calls_in_both_variants():
    text = turn(
        v3("calculator", {"expression": "1 + 2"}),
        v31("search", {"query": "café 中文", "k": [1, {"x": None}]}),
        v3("now", {}),
    )
    assert calls(PARSER.parse(text + EOS)) == [
        ("calculator", {"expression": "1 + 2"}),
        ("search", {"query": "café 中文", "k": [1, {"x": None}]}),
        ("now", {}),
    ]


def test_the_wrapper_may_be_missing_as_deepseeks_own_template_writes_it():
    # the template leaves out <｜tool▁calls▁end｜> after a single call, and
    # <｜tool▁calls▁begin｜> in every tool-call turn but the first
    single = CALLS_BEGIN + v3("calculator", {"expression": "1"})
    later = "\n" + v3("calculator", {"expression": "2"}) + CALLS_END
    assert calls(PARSER.parse(single)) == [("calculator", {"expression": "1"})]
    assert calls(PARSER.parse(later)) == [("calculator", {"expression": "2"})]
    assert PARSER.parse(later).content == ""


def test_a_tool_named_function_in_the_v31_form_and_no_arguments():
    assert calls(PARSER.parse(v31("function", {"a": 1}))) == [("function", {"a": 1})]
    assert calls(PARSER.parse(f"{CALL_BEGIN}function{SEP}now{CALL_END}")) == [("now", {})]


def test_calls_inside_think_are_not_run():
    text = "<think>maybe " + turn(v3("a", {})) + "</think>Done: " + turn(v3("b", {"x": 1}))
    parsed = PARSER.parse(text)
    assert calls(parsed) == [("b", {"x": 1})]
    assert parsed.reasoning.startswith("maybe") and parsed.content == "Done:"


def test_plain_text_is_content():
    parsed = PARSER.parse("The answer is 42.")
    assert parsed.content == "The answer is 42." and not parsed.calls and not parsed.errors


MALFORMED = {
    "unclosed call": (CALLS_BEGIN + CALL_BEGIN + "function" + SEP + "a\n{}", "is not closed"),
    "stray end": ("text" + CALL_END, f"found {CALL_END} without {CALL_BEGIN}"),
    "no separator": (CALL_BEGIN + "calculator {}" + CALL_END, f"no {SEP}"),
    "no name": (CALL_BEGIN + "function" + SEP + "\n```json\n{}\n```" + CALL_END, "no tool name"),
    "bad JSON": (v31("a", {}).replace("{}", "{'x': 1}"), "invalid JSON"),
    "NaN": (v31("a", {}).replace("{}", '{"x": NaN}'), "NaN is not JSON"),
    "overflow": (v31("a", {}).replace("{}", '{"x": 1e999}'), "too large"),
    "a list": (v31("a", {}).replace("{}", "[1, 2]"), "must be a JSON object"),
    "unclosed fence": (v3("a", {}).replace("\n```" + CALL_END, CALL_END), "fence"),
    "empty wrapper": (CALLS_BEGIN + CALLS_END, f"followed by no {CALL_BEGIN}"),
    "deep nest": (v31("a", {}).replace("{}", '{"x": ' + "[" * 150 + "]" * 150 + "}"), "levels"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_markup_is_an_error_that_shows_the_format(case):
    text, problem = MALFORMED[case]
    parsed = PARSER.parse(text)
    assert not parsed.calls, parsed.calls
    [error] = parsed.errors
    assert problem in error.message
    assert error.message.endswith(PARSER.expected) and "```json" in error.message
    assert error.raw


def test_a_broken_call_does_not_hide_the_next_one():
    text = CALLS_BEGIN + CALL_BEGIN + "function" + SEP + "a\n" + v3("b", {"y": 2}) + CALLS_END
    parsed = PARSER.parse(text)
    assert calls(parsed) == [("b", {"y": 2})]
    assert len(parsed.errors) == 1 and "is not closed" in parsed.errors[0].message


def test_lone_surrogates_and_non_strings_do_not_crash():
    parsed = PARSER.parse(v31("a\ud800", {"s": "\udfff"}))
    assert parsed.calls[0].name == "a\ud800"
    assert isinstance(PARSER.parse(None), type(parsed))  # type: ignore[arg-type]


# -- adversarial sizes (each parse in a child process under a CPU-time cap) -------------------
KB = 1000
ADVERSARIAL = {
    "1 MB of call starts": CALL_BEGIN * (1000 * KB // len(CALL_BEGIN)),
    "1 MB of stray ends": CALL_END * (1000 * KB // len(CALL_END)),
    "1 MB of empty calls": (CALL_BEGIN + CALL_END) * (1000 * KB // 40),
    "1 MB of wrappers": (CALLS_BEGIN + CALLS_END) * (1000 * KB // 40),
    "one call of 1 MB arguments": v31("a", {"x": "y" * 1000 * KB}),
    "1 MB of separators in one call": CALL_BEGIN + SEP * (1000 * KB // 12) + CALL_END,
    "an unclosed fence of newlines": CALL_BEGIN + "function" + SEP + "a\n```" + "\n" * 500 * KB,
    "starts, then one end": CALL_BEGIN * 50_000 + CALL_END,
    "1 MB of end-of-sentence": "x" + (EOS + " ") * 50_000,
    "many valid calls": turn(*[v3("calculator", {"expression": "1 + 2"})] * 10_000),
    "lone surrogates": v31("a", {"x": "\ud800" * 500 * KB}),
}


@pytest.fixture(scope="module")
def clock():
    clock = ParseClock()
    yield clock
    clock.close()


@pytest.mark.parametrize("case", list(ADVERSARIAL))
def test_large_adversarial_turns_parse_in_linear_time(clock, case):
    check_bounded(clock, "deepseek_v3", ADVERSARIAL[case])


# -- the real DeepSeek-V3 tokenizer -----------------------------------------------------------
@pytest.fixture(scope="module")
def folder():
    return real_tokenizer("deepseek_v3")


@pytest.fixture(scope="module")
def chat(folder):
    return ChatTemplate.load(folder)


@pytest.fixture(scope="module")
def broken(folder):
    """AutoTokenizer's reading of the folder, which loses text under transformers 5."""
    tokenizer = load_tokenizer(folder, "transformers")
    if round_trip_loss(tokenizer) is None:
        pytest.skip("this transformers reads DeepSeek-V3's tokenizer right")
    return tokenizer


def test_transformers_autotokenizer_drops_every_space(broken, folder):
    ids = broken.encode("Hello world", add_special_tokens=False)
    assert broken.decode(ids) == "Helloworld"
    as_is = load_tokenizer(folder, "tokenizer.json")
    assert as_is.decode(as_is.encode("Hello world", add_special_tokens=False)) == "Hello world"
    assert round_trip_loss(as_is) is None
    assert as_is.encode("Hello world", add_special_tokens=False) != ids  # other ids, too


def test_auto_reads_tokenizer_json_once_autotokenizer_loses_text(broken, folder, caplog):
    import agentfly_cli.chat.tokenizer_loading as loading

    loading._warned.discard(str(folder))
    with caplog.at_level(logging.WARNING, logger=loading.__name__):
        first, second = load_tokenizer(folder), load_tokenizer(folder)
    assert round_trip_loss(first) is None
    assert "'Thequickbrownfox" in getattr(first, SUBSTITUTED)
    [record] = [r for r in caplog.records if "tokenizer.json as is" in r.getMessage()]
    assert "LlamaTokenizer" in record.getMessage()
    assert getattr(second, SUBSTITUTED)  # warned once, substituted every time


def test_loader_errors_are_one_line(tmp_path, folder):
    with pytest.raises(UserError, match="unknown; use one of: auto, transformers, tokenizer.json"):
        load_tokenizer(folder, "slow")
    with pytest.raises(UserError, match="has no tokenizer.json"):
        load_tokenizer(tmp_path, "tokenizer.json")


def test_the_backend_setting_reaches_the_chat_layer(broken, folder, tiny_model, tmp_path):
    from agentfly_cli.recipes.loader import load_config
    from agentfly_cli.rollout.from_settings import resolve_run

    data = tmp_path / "tasks.jsonl"
    data.write_text('{"question": "What is 1 + 2?", "answer": "3"}\n')

    def resolved(*sets: str):
        fields = {"model": str(tiny_model), "data.path": str(data)}
        return resolve_run(
            load_config("calculator", [f"backend.tokenizer={folder}", *sets], **fields)
        )

    assert type(resolved().chat.tokenizer) is not type(broken)
    assert getattr(resolved().chat.tokenizer, SUBSTITUTED)
    forced = resolved("backend.tokenizer_loader=transformers").chat.tokenizer
    assert type(forced) is type(broken) and round_trip_loss(forced) is not None


def test_chat_on_the_real_tokenizer(chat):
    assert chat.default_parser == "deepseek_v3"
    assert chat.eot_token_ids == [chat.tokenizer.convert_tokens_to_ids(EOS)]
    for marker in (CALLS_BEGIN, CALL_BEGIN, SEP, CALL_END, CALLS_END):
        assert len(chat.encode_text(marker)) == 1  # each marker is one special token
    assert get_parser(chat.default_parser).name == "deepseek_v3"


def wire(name: str, arguments: dict) -> dict:
    """A tool call as OpenAI sends it (arguments a JSON string): DeepSeek-V3's template needs
    the string, and a null content, to write calls at all."""
    arguments = json.dumps(arguments, ensure_ascii=False)
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


TWO = [("calculator", {"expression": "12 + 30"}), ("search", {"query": "naïve 中文", "k": 3})]
ONE = [("calculator", {"expression": "6 * 7"})]
CONVERSATION = [
    *MESSAGES,
    {"role": "assistant", "content": None, "tool_calls": [wire(*c) for c in TWO]},
    {"role": "tool", "content": "42"},
    {"role": "tool", "content": "no results"},
    {"role": "assistant", "content": None, "tool_calls": [wire(*c) for c in ONE]},
    {"role": "tool", "content": "42"},
    {"role": "assistant", "content": "Both are 42."},
]


def assistant_turns(chat, conversation) -> list[str]:
    """The text the template writes for each assistant message, as the model would sample it:
    after what the conversation before renders to (and the <｜Assistant｜> header), up to the
    end-of-sentence token."""
    turns = []
    for i, message in enumerate(conversation):
        if message["role"] != "assistant":
            continue
        before = chat.render_text(conversation[:i])
        after = chat.render_text(conversation[: i + 1])
        common = next(
            (k for k, (a, b) in enumerate(zip(before, after, strict=False)) if a != b),
            min(len(before), len(after)),
        )
        text = after[common:].removeprefix("<｜Assistant｜>")
        turns.append(text.split(EOS)[0])
    return turns


@pytest.mark.parametrize("conversation", [CONVERSATION, CONVERSATION[:3]], ids=["multi", "one"])
def test_the_parser_reads_back_every_call_the_template_writes(chat, conversation):
    written = [
        [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m["tool_calls"]]
        if m.get("tool_calls")
        else []
        for m in conversation
        if m["role"] == "assistant"
    ]
    turns = assistant_turns(chat, conversation)
    assert CALL_BEGIN in turns[0] and len(turns) == len(written)
    parser = get_parser("deepseek_v3")
    for text, expected in zip(turns, written, strict=True):
        parsed = parser.parse(text)
        assert calls(parsed) == expected, text
        assert not parsed.errors
        assert parsed.content == ("" if expected else "Both are 42.")


def test_sampled_turns_with_tool_results_are_token_exact(chat):
    first = turn(v3("calculator", {"expression": "12 + 30"}), content="I will add.")
    second = turn(v3("calculator", {"expression": "6 * 7"}), v3("calculator", {"expression": "1"}))
    one_turn = simulate(chat, MESSAGES, [(first, [("calculator", "c0", "42")]), ("42.", None)])
    assert_mask_invariant(one_turn)
    assert_matches_full_render(chat, one_turn)
    assert chat.decode(one_turn.deltas[0]) == (
        "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>42<｜tool▁output▁end｜><｜tool▁outputs▁end｜>"
    )
    results = [("calculator", "c1", "42"), ("calculator", "c2", "1")]
    run = simulate(chat, MESSAGES, [(first, [("calculator", "c0", "42")]), (second, results)])
    assert_mask_invariant(run)
    assert chat.decode(run.deltas[1]) == (
        "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>42<｜tool▁output▁end｜>\n"
        "<｜tool▁output▁begin｜>1<｜tool▁output▁end｜><｜tool▁outputs▁end｜>"
    )
    # the sampled ids decode to the model's text, and parse back to its calls
    sampled = chat.decode(run.sampled)
    assert sampled.startswith("I will add." + CALLS_BEGIN)
    assert [len(PARSER.parse(t).calls) for t in sampled.split(EOS)[:2]] == [1, 2]
    # Re-rendering the whole conversation is not prefix-preserving here: the template writes
    # <｜tool▁outputs▁begin｜> only before the first results of a conversation (a flag it
    # never resets). The trajectory keeps each turn's delta as the template writes one turn.
    full = chat.decode(chat.encode_text(chat.render_text(run.conversation, TOOLS)))
    assert full.count("<｜tool▁outputs▁begin｜>") == 1
    assert chat.decode(run.ids).count("<｜tool▁outputs▁begin｜>") == 2


# -- the doctor -------------------------------------------------------------------------------
def doctor(folder, *args: str) -> tuple[int, dict[str, dict]]:
    result = CliRunner().invoke(build_app(), ["doctor", str(folder), "--json", *args])
    verdicts = {v["check"].split(" reads")[0]: v for v in json.loads(result.output)}
    return result.exit_code, verdicts


def test_doctor_verdicts_on_deepseek_v3(broken, folder):
    code, verdicts = doctor(folder)
    assert code == 0
    assert {k: v["status"] for k, v in verdicts.items()} == {
        "end of turn": "pass",
        "tokenizer round trip": "warn",  # fixed by reading tokenizer.json as is
        "tool schemas": "warn",  # DeepSeek-V3's template ignores `tools`
        "observation deltas": "pass",
        "parser deepseek_v3": "pass",
    }
    warn = verdicts["tokenizer round trip"]
    assert (
        "AutoTokenizer (LlamaTokenizer)" in warn["detail"]
        and "PreTrainedTokenizerFast" in (warn["fix"])
    )


def test_doctor_fails_the_broken_tokenizer_and_its_fix_works(broken, folder):
    code, verdicts = doctor(folder, "--tokenizer-loader", "transformers")
    assert code == 1
    fail = verdicts["tokenizer round trip"]
    assert fail["status"] == "fail" and "'Thequickbrownfox" in fail["detail"]
    assert fail["fix"].startswith("--set backend.tokenizer_loader=tokenizer.json")
    code, verdicts = doctor(folder, "--tokenizer-loader", "tokenizer.json")
    assert code == 0 and verdicts["tokenizer round trip"]["status"] == "pass"


# -- the gateway ------------------------------------------------------------------------------
def test_the_gateway_records_a_deepseek_tool_loop_token_exactly(chat):
    """An OpenAI client's loop on DeepSeek-V3's own template: the call comes back as OpenAI
    ``tool_calls``; the echoed history (whose arguments the template only writes as a string,
    with no content) extends the segment by the tool result's delta."""
    from agentfly_cli.serve.gateway import Gateway
    from tests.serve.test_serve_capture import Replies, echoed

    reply = turn(v3("calculator", {"expression": "6 * 7"}))
    backend = Replies(chat, [reply, "It is 42."])
    gateway = Gateway(backend, chat, get_parser("deepseek_v3"), "deepseek")
    messages = [{"role": "user", "content": "What is 6 * 7?"}]
    first = asyncio.run(gateway.complete("d1", {"messages": messages, "tools": TOOLS}))
    message = first["choices"][0]["message"]
    [call] = message["tool_calls"]
    assert call["function"]["name"] == "calculator"
    assert json.loads(call["function"]["arguments"]) == {"expression": "6 * 7"}
    history = {**echoed(message), "content": None}  # as the openai SDK echoes a call
    messages += [history, {"role": "tool", "tool_call_id": "x", "content": "42"}]
    second = asyncio.run(gateway.complete("d1", {"messages": messages, "tools": TOOLS}))
    assert second["choices"][0]["message"]["content"] == "It is 42."
    [trajectory] = gateway.close_episode("d1", reward=1.0).trajectories()
    trajectory.check()
    grown = chat.decode(backend.prompts[1][len(backend.prompts[0]) :])
    assert grown.startswith(reply) and "<｜tool▁output▁begin｜>42" in grown
    # a history that extends no segment is rendered whole: the call in the template's form
    backend.texts.append("42.")
    asyncio.run(gateway.complete("d2", {"messages": messages, "tools": TOOLS}))
    fresh = chat.decode(backend.prompts[2])
    assert f"{SEP}calculator" in fresh and "<｜tool▁output▁begin｜>42" in fresh
