"""User turns mid-episode: a row's user messages arrive after an answer or after turn N, as the
template's exact delta (loss mask 0); the chain ends at an answer only when none is left."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentfly_cli.backends.scripted import ScriptedBackend
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.errors import UserError
from agentfly_cli.rollout.engine import RolloutEngine
from agentfly_cli.rollout.tasks import RowRules, check_tasks, load_tasks
from agentfly_cli.settings.rollout import RolloutSettings
from tests.helpers.realdata_paths import real_tokenizer
from tools_builtin.answer import answer
from tools_builtin.calculator import calculator

TOOLS = [calculator, answer]


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@pytest.fixture(scope="module")
def chat(tiny_model) -> ChatTemplate:
    return ChatTemplate.load(str(tiny_model))


def rollout(chat, script, task, **settings):
    options = {"n": 1, "max_turns": 4, **settings}
    engine = RolloutEngine(
        ScriptedBackend(script, chat), chat, get_parser("hermes"), TOOLS, None,
        RolloutSettings(**options),
    )  # fmt: skip
    [trajectory] = asyncio.run(engine.run([task]))
    trajectory.check()
    sampled = [i for text in script[0][: trajectory.num_turns] for i in chat.encode_response(text)]
    assert trajectory.sampled_ids == sampled  # only sampled ids are trained
    return trajectory


def rerendered(chat: ChatTemplate, trajectory) -> tuple[str, list[int]]:
    """The template's own rendering of the final conversation, up to its last assistant turn
    (raw assistant text, as the model sampled it), as text and ids."""
    messages = [{k: v for k, v in m.items() if k not in ("tool_calls", "reasoning_content")}
                for m in trajectory.messages]  # fmt: skip
    while messages[-1]["role"] != "assistant":
        messages.pop()
    text = chat.render_text(messages, [t.schema for t in TOOLS])
    return text, chat.encode_text(text)


def user_spans(trajectory) -> list[str]:
    """The contents of the user messages after the first prompt."""
    first = next(i for i, m in enumerate(trajectory.messages) if m["role"] == "assistant")
    return [m["content"] for m in trajectory.messages[first:] if m["role"] == "user"]


def test_a_user_turn_after_the_answer_keeps_the_chain_going(chat):
    task = {"question": "What is 2 + 2?",
            "user_turns": [{"content": "And 3 * 3?", "after": "answer"}]}  # fmt: skip
    trajectory = rollout(chat, [["It is 4.", "It is 9.", "never sampled"]], task)
    assert trajectory.finish_reason == "answer" and trajectory.num_turns == 2
    assert trajectory.prediction == "It is 9."  # the last answer
    assert [m["role"] for m in trajectory.messages] == ["user", "assistant", "user", "assistant"]
    assert user_spans(trajectory) == ["And 3 * 3?"]
    assert trajectory.meta["user_turns"] == {"total": 1, "delivered_after": [0]}
    # the user turn's tokens are masked, and the record is the template's own rendering
    user_turn = trajectory.turns[2]
    assert user_turn.role == "observation" and not any(
        trajectory.loss_mask[user_turn.start : user_turn.end]
    )
    assert trajectory.ids == rerendered(chat, trajectory)[1][: len(trajectory.ids)]


def test_a_user_turn_after_turn_n_follows_that_turns_tool_results(chat):
    task = {"question": "What is 6 * 7?", "answer": "42",
            "user_turns": [{"content": "Show the product only.", "after": 0}]}  # fmt: skip
    script = [[call("calculator", expression="6 * 7"), call("answer", answer="42")]]
    trajectory = rollout(chat, script, task)
    assert trajectory.finish_reason == "terminal_tool"
    assert [m["role"] for m in trajectory.messages] == [
        "user", "assistant", "tool", "user", "assistant", "tool"
    ]  # fmt: skip
    assert trajectory.messages[3]["content"] == "Show the product only."
    assert [t.role for t in trajectory.turns] == [
        "prompt", "assistant", "observation", "assistant"
    ]  # fmt: skip
    assert trajectory.ids == rerendered(chat, trajectory)[1][: len(trajectory.ids)]


def test_an_answer_hands_the_floor_to_a_turn_that_waits_for_a_later_turn(chat):
    task = {"question": "Hi", "user_turns": [{"content": "Still there?", "after": 5},
                                             {"content": "Bye.", "after": "answer"}]}  # fmt: skip
    trajectory = rollout(chat, [["Hello.", "Yes.", "Bye!"]], task)
    assert user_spans(trajectory) == ["Still there?", "Bye."]
    assert trajectory.finish_reason == "answer" and trajectory.prediction == "Bye!"
    assert trajectory.meta["user_turns"]["delivered_after"] == [0, 1]


def test_turns_due_together_arrive_together(chat):
    task = {"question": "Count.", "user_turns": [{"content": "one", "after": 0},
                                                 {"content": "two", "after": 0}]}  # fmt: skip
    script = [[call("calculator", expression="1"), "done"]]
    trajectory = rollout(chat, script, task)
    assert user_spans(trajectory) == ["one", "two"] and trajectory.num_turns == 2
    assert trajectory.ids == rerendered(chat, trajectory)[1][: len(trajectory.ids)]


def test_a_model_that_never_answers_ends_at_max_turns_with_turns_undelivered(chat):
    task = {"question": "Go.", "user_turns": [{"content": "Next.", "after": "answer"}] * 2}
    trajectory = rollout(chat, [[call("calculator", expression="1 + 1")] * 3], task, max_turns=3)
    assert trajectory.finish_reason == "max_turns" and trajectory.num_turns == 3
    assert user_spans(trajectory) == []
    assert trajectory.meta["user_turns"] == {"total": 2, "delivered_after": []}
    # an answer at the last turn leaves the next user turn undelivered too
    last = rollout(chat, [["First.", "Second."]], task, max_turns=2)
    assert last.finish_reason == "max_turns" and user_spans(last) == ["Next."]
    assert last.prediction == "Second."


def test_the_field_is_the_one_data_user_turns_field_names(chat):
    from agentfly_cli.rollout.engine import RolloutEngine

    task = {"question": "Hi", "followups": [{"content": "More?"}]}  # after: answer by default
    engine = RolloutEngine(
        ScriptedBackend([["a", "b"]], chat), chat, get_parser("hermes"), TOOLS, None,
        RolloutSettings(n=1), user_turns_field="followups",
    )  # fmt: skip
    [trajectory] = asyncio.run(engine.run([task]))
    assert user_spans(trajectory) == ["More?"] and trajectory.prediction == "b"


@pytest.mark.parametrize(
    ("turns", "message"),
    [
        ("hi", "'user_turns' must be a list of"),
        (["hi"], "user_turns[0] must be an object"),
        ([{"content": 3}], "user_turns[0].content must be a string"),
        ([{"content": "x", "after": -1}], 'user_turns[0].after must be "answer" or'),
        ([{"content": "x", "after": "tool"}], "user_turns[0].after must be"),
        ([{"content": "x", "afer": 1}], "user_turns[0] has the unknown key(s) afer"),
    ],
)
def test_malformed_user_turns_are_one_error_naming_the_row(tmp_path, turns, message):
    path = tmp_path / "t.jsonl"
    rows = [{"question": "ok"}, {"question": "q", "user_turns": turns}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(UserError) as error:
        load_tasks(path)
    assert str(error.value).startswith(f"{path} row 2: ") and message in str(error.value)
    # under another field name, the same field is just data
    assert load_tasks(path, rules=RowRules(user_turns_field="other")) == rows


def test_rows_without_a_question_need_an_opening_env():
    rows = [{"game": "wordle"}]
    with pytest.raises(UserError, match="needs a 'question' field"):
        check_tasks(rows, "tasks")
    assert check_tasks(rows, "tasks", RowRules(needs_prompt=False)) == rows


# -- real templates ------------------------------------------------------------------------------
def real_chat(case: str) -> ChatTemplate:
    if case == "qwen2.5":
        folder = real_tokenizer("qwen2.5")
        return ChatTemplate.load(str(folder), str(folder / "chat_template.jinja"))
    if case == "smollm2-hermes":
        hermes = real_tokenizer("hermes")
        return ChatTemplate.load(
            str(real_tokenizer("smollm2")), str(hermes / "chat_template.jinja")
        )
    return ChatTemplate.load(
        str(real_tokenizer("qwen3")), chat_template_kwargs={"enable_thinking": True}
    )


@pytest.mark.parametrize("case", ["qwen2.5", "smollm2-hermes", "qwen3-thinking"])
def test_user_turns_are_exact_deltas_on_real_templates(case):
    chat = real_chat(case)
    think = case == "qwen3-thinking"

    def turn(text: str, thought: str) -> str:
        return f"<think>\n{thought}\n</think>\n\n{text}" if think else text

    script = [[
        turn(call("calculator", expression="17 * 23"), "Use the calculator."),
        turn("It is 391.", "The tool said 391."),
        turn("It is 392.", "Add one."),
    ]]  # fmt: skip
    task = {"question": "What is 17 * 23?", "user_turns": [
        {"content": "Thanks. Please check it once more.", "after": 0},
        {"content": "Now add one.", "after": "answer"},
    ]}  # fmt: skip
    trajectory = rollout(chat, script, task, max_turns=5)
    assert trajectory.finish_reason == "answer" and trajectory.prediction.endswith("It is 392.")
    assert user_spans(trajectory) == ["Thanks. Please check it once more.", "Now add one."]
    text, ids = rerendered(chat, trajectory)
    deltas = [t for t in trajectory.turns if t.role == "observation"]
    for span in deltas:  # each delta follows an end-of-turn token, as in the template's own text
        assert trajectory.ids[span.start - 1] in chat.eot_token_ids
    if not think:  # prefix-preserving: the record is the template's rendering, token for token
        assert trajectory.ids == ids[: len(trajectory.ids)]
        return
    # Qwen3 drops earlier <think> blocks once a user turn follows, so its re-rendering differs;
    # the record keeps every sampled token, and each delta is the template's text after the turn
    assert trajectory.ids != ids[: len(trajectory.ids)]
    for span in deltas:  # the text the template writes after that assistant turn's end
        index = sum(1 for t in trajectory.turns if t.end <= span.start and t.role == "assistant")
        upto = _messages_through_assistant(trajectory, index)
        delta = chat.decode(trajectory.ids[span.start : span.end])
        after = trajectory.messages[len(upto) : _next_assistant(trajectory, len(upto))]
        full = chat.render_text(upto + after, [t.schema for t in TOOLS], add_generation_prompt=True)
        content = upto[-1]["content"].split("</think>")[-1].strip("\n")
        assert full.endswith(content + "<|im_end|>" + delta), (full[-300:], delta)
    assert "<|im_start|>user\nNow add one.<|im_end|>" in chat.decode(
        trajectory.ids[deltas[-1].start : deltas[-1].end]
    )


def _messages_through_assistant(trajectory, count: int) -> list[dict]:
    """The messages up to the ``count``-th assistant message (raw text), included."""
    out, seen = [], 0
    for message in trajectory.messages:
        out.append(
            {k: v for k, v in message.items() if k not in ("tool_calls", "reasoning_content")}
        )
        if message["role"] == "assistant":
            seen += 1
            if seen == count:
                return out
    raise AssertionError(count)


def _next_assistant(trajectory, start: int) -> int:
    return next(i for i in range(start, len(trajectory.messages))
                if trajectory.messages[i]["role"] == "assistant")  # fmt: skip


def test_a_run_reads_the_field_its_settings_name(tiny_model, tmp_path):
    """``data.user_turns_field`` reaches the engine a run builds (rollout's own path)."""
    from agentfly_cli.recipes.loader import load_config
    from agentfly_cli.rollout.from_settings import build_rollout, run_rollout

    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps({"responses": ["4", call("answer", answer="9")]}) + "\n")
    config = load_config(
        "calculator",
        model=str(tiny_model),
        **{"backend.name": "scripted", "backend.script": str(script), "rollout.n": 1,
           "chat.parser": "hermes", "data.user_turns_field": "later"},
    )  # fmt: skip
    task = {"question": "2 + 2?", "answer": "9", "later": [{"content": "And 3 * 3?"}]}
    [trajectory] = run_rollout(build_rollout(config, tasks=[task])).trajectories
    trajectory.check()
    assert trajectory.messages[-3] == {"role": "user", "content": "And 3 * 3?"}  # after "4"
    assert trajectory.meta["user_turns"] == {"total": 1, "delivered_after": [0]}
    assert (trajectory.finish_reason, trajectory.prediction) == ("terminal_tool", "9")
    assert trajectory.reward == 1.0
