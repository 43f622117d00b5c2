"""Token-exactness of whole rollouts on real tokenizers and chat templates.

The files come from ../shared/realdata, else build/realdata (`make realdata`; see
tests/fixtures/realdata/README.md).

The invariant: ids[loss_mask == 1] is exactly the concatenation of every sampled id. For
prefix-preserving templates, ids also equal the template's own tokenization of the final
conversation. Qwen3 with thinking is not prefix-preserving: re-rendering would drop the earlier
<think> blocks, and the record must keep them as sampled.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from agentfly_cli.backends.scripted import ScriptedBackend
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.rollout.engine import RolloutEngine
from agentfly_cli.settings.chat import ObservationSettings
from agentfly_cli.settings.rollout import RolloutSettings
from rewards_builtin.text import math_equal
from tools_builtin.answer import answer
from tools_builtin.calculator import calculator

TOOLS = [calculator, answer]


def call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def load(realdata, case: str) -> ChatTemplate:
    if case == "qwen2.5":
        folder = realdata / "qwen2.5"
        return ChatTemplate.load(str(folder), str(folder / "chat_template.jinja"))
    if case == "qwen3-thinking":
        return ChatTemplate.load(
            str(realdata / "qwen3"), chat_template_kwargs={"enable_thinking": True}
        )
    if case == "smollm2-hermes":
        return ChatTemplate.load(
            str(realdata / "smollm2"), str(realdata / "hermes" / "chat_template.jinja")
        )
    raise AssertionError(case)


def script_for(case: str) -> list[list[str]]:
    think = case == "qwen3-thinking"

    def turn(text: str, thought: str) -> str:
        return f"<think>\n{thought}\n</think>\n\n{text}" if think else text

    return [
        [
            turn(call("calculator", expression="17 * 23"), "I need 17 * 23; use the calculator."),
            turn(
                "Let me double-check.\n"
                + call("calculator", expression="391 - 1")
                + "\n"
                + call("calculator", expression="391 + 0"),
                "The result was 391. Two checks at once.",
            ),
            turn(call("answer", answer="391"), "Both agree, so the answer is 391."),
        ]
    ]


def rollout(chat: ChatTemplate, script, n: int = 2):
    engine = RolloutEngine(
        ScriptedBackend(script, chat),
        chat,
        get_parser("hermes"),
        TOOLS,
        math_equal,
        RolloutSettings(n=n, max_turns=5),
        system_prompt="You are a careful assistant.",
    )
    return asyncio.run(engine.run([{"question": "What is 17 * 23?", "answer": "391"}]))


@pytest.mark.parametrize("case", ["qwen2.5", "qwen3-thinking", "smollm2-hermes"])
def test_invariant_on_real_templates(realdata, case):
    chat = load(realdata, case)
    script = script_for(case)
    for trajectory in rollout(chat, script):
        trajectory.check()
        trained = [i for i, m in zip(trajectory.ids, trajectory.loss_mask, strict=True) if m == 1]
        expected = [i for text in script[0] for i in chat.encode_response(text)]
        assert trained == expected
        assert trajectory.finish_reason == "terminal_tool"
        assert trajectory.reward == 1.0
        assert [c.observation for c in trajectory.tool_calls] == ["391", "390", "391", "391"]
        # every sampled turn ends with the end-of-turn token the template expects
        for turn in trajectory.turns:
            if turn.role == "assistant":
                assert turn.sampled_ids[-1] in chat.eot_token_ids


def _rerendered(chat: ChatTemplate, trajectory) -> list[int]:
    messages = [
        {k: v for k, v in m.items() if k not in ("tool_calls", "reasoning_content")}
        for m in trajectory.messages
    ]
    while messages[-1]["role"] != "assistant":
        messages.pop()
    text = chat.render_text(messages, [t.schema for t in TOOLS])
    rendered = chat.tokenizer(text, add_special_tokens=False)["input_ids"]
    # what the template writes after the final end-of-turn token ("\n") is never sampled
    tail = rendered[len(trajectory.ids) :]
    assert chat.decode(tail).strip() == "", chat.decode(tail)
    return rendered[: len(trajectory.ids)]


@pytest.mark.parametrize("case", ["qwen2.5", "smollm2-hermes"])
def test_prefix_preserving_templates_match_their_own_rendering(realdata, case):
    chat = load(realdata, case)
    [trajectory, _] = rollout(chat, script_for(case))
    assert trajectory.ids == _rerendered(chat, trajectory)


def test_qwen3_thinking_with_tool_role_matches_its_own_rendering(realdata):
    # After the last real user query Qwen3 keeps <think> blocks, so tool-role turns are safe.
    chat = load(realdata, "qwen3-thinking")
    [trajectory, _] = rollout(chat, script_for("qwen3-thinking"))
    assert trajectory.ids == _rerendered(chat, trajectory)


def test_qwen3_thinking_keeps_sampled_think_blocks_that_rerendering_drops(realdata):
    # Results as user turns make each one a new "query": re-rendering the conversation drops
    # every earlier <think> block. The record must keep what was sampled.
    chat = ChatTemplate.load(
        str(realdata / "qwen3"),
        observation=ObservationSettings(role="user", template="RESULT: {observation}"),
        chat_template_kwargs={"enable_thinking": True},
    )
    script = script_for("qwen3-thinking")
    [trajectory, _] = rollout(chat, script)
    trajectory.check()
    text = chat.decode(trajectory.ids)
    for thought in ("use the calculator", "Two checks at once", "Both agree"):
        assert thought in text
    rerendered = chat.decode(_rerendered(chat, trajectory))
    assert "use the calculator" not in rerendered  # the drift trap the engine avoids
    assert "Both agree" in rerendered
    trained = [i for i, m in zip(trajectory.ids, trajectory.loss_mask, strict=True) if m == 1]
    assert trained == [i for text in script[0] for i in chat.encode_response(text)]
