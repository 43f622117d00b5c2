"""``rollout.no_call``: what a turn that neither calls a tool nor answers does to its chain."""

from __future__ import annotations

import asyncio

import pytest

from agentfly_cli.backends.scripted import ScriptedBackend
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.rollout.engine import RolloutEngine
from agentfly_cli.rollout.summary import summarize
from agentfly_cli.settings.rollout import RolloutSettings
from rewards_builtin.text import math_equal
from tools_builtin.calculator import calculator

# an environment-style protocol: one command, no answer command
CALC_ONLY = {"commands": {"CALC": {"tool": "calculator", "argument": "expression"}}}
WITH_ANSWER = {
    "commands": {
        "CALC": {"tool": "calculator", "argument": "expression"},
        "ANSWER": {"tool": None},
    }
}


@pytest.fixture(scope="module")
def chat(tiny_model) -> ChatTemplate:
    return ChatTemplate.load(str(tiny_model))


def rollout(chat, turns, commands=CALC_ONLY, **settings):
    options = {"n": 1, "max_turns": 4, "seed": 0}
    options.update(settings)
    engine = RolloutEngine(
        ScriptedBackend([turns], chat),
        chat,
        get_parser("line", commands),
        [calculator],
        math_equal,
        RolloutSettings(**options),
    )
    [trajectory] = asyncio.run(engine.run([{"question": "2 + 3?", "answer": "5"}]))
    trajectory.check()  # token-exact, with the error observations in the record
    return trajectory


def test_by_default_a_plain_turn_is_the_answer(chat):
    trajectory = rollout(chat, ["I am done here.", "CALC: 2 + 3"])
    assert trajectory.finish_reason == "answer" and trajectory.num_turns == 1
    assert trajectory.prediction == "I am done here." and trajectory.tool_calls == []


def test_under_error_a_plain_turn_is_an_error_and_the_chain_goes_on(chat):
    trajectory = rollout(
        chat, ["I am done here.", "CALC: 2 + 3", "Bye."], no_call="error", max_turns=3
    )
    assert trajectory.num_turns == 3 and trajectory.finish_reason == "max_turns"
    kinds = [c.error_kind for c in trajectory.tool_calls]
    assert kinds == ["no_call", None, "no_call"]
    first = trajectory.tool_calls[0].observation
    assert "called no tool" in first and "CALC: <expression>" in first
    # the model reads it as the observation of that turn, and the loss never trains on it
    roles = [m["role"] for m in trajectory.messages]
    after_first_turn = trajectory.messages[roles.index("assistant") + 1]
    assert first in after_first_turn["content"]
    [observation, *_] = [t for t in trajectory.turns if t.role == "observation"]
    assert observation.end > observation.start
    assert set(trajectory.loss_mask[observation.start : observation.end]) == {0}
    assert summarize([trajectory])["error_kinds"] == {"no_call": 2}
    assert trajectory.tool_calls[1].observation.strip() == "5"


def test_plain_turns_spend_the_error_budget(chat):
    trajectory = rollout(chat, ["hmm", "well", "so", "CALC: 1"], no_call="error", max_errors=2)
    assert trajectory.finish_reason == "errors" and trajectory.num_turns == 2


def test_an_answer_command_still_ends_the_chain_under_error(chat):
    trajectory = rollout(chat, ["CALC: 2 + 3", "ANSWER: 5"], WITH_ANSWER, no_call="error")
    assert trajectory.finish_reason == "answer" and trajectory.prediction == "5"
    assert [c.error_kind for c in trajectory.tool_calls] == [None]


def test_a_call_with_text_around_it_is_not_a_no_call(chat):
    trajectory = rollout(chat, ["Let me see.\nCALC: 2 + 3", "ok"], no_call="error", max_turns=2)
    assert [c.error_kind for c in trajectory.tool_calls] == [None, "no_call"]


def test_the_setting_names_its_choices():
    with pytest.raises(ValueError, match="'answer' or 'error'"):
        RolloutSettings(no_call="stop")
