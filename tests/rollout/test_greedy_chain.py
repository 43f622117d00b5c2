"""``RolloutEngine.run(greedy=True)``: one more chain per task, sampled at temperature 0 and
marked ``meta["greedy"]`` (ReMax's baseline), scored like the others."""

from __future__ import annotations

import asyncio

import pytest

from agentfly_cli.backends.scripted import ScriptedBackend
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.rollout.engine import RolloutEngine
from agentfly_cli.settings.rollout import RolloutSettings
from rewards_builtin.text import math_equal


class RecordingBackend(ScriptedBackend):
    """The scripted replies; remembers each request's temperature by (task, sample)."""

    def __init__(self, script, chat) -> None:
        super().__init__(script, chat)
        self.temperatures: dict[tuple[int, int], float] = {}

    async def generate(self, prompt_ids, params, context=None):
        self.temperatures[context.task_index, context.sample_index] = params.temperature
        return await super().generate(prompt_ids, params, context)


@pytest.fixture(scope="module")
def chat(tiny_model) -> ChatTemplate:
    return ChatTemplate.load(str(tiny_model))


def engine_of(chat, n: int) -> RolloutEngine:
    backend = RecordingBackend([["It is 12."], ["It is 7."]], chat)
    settings = RolloutSettings(n=n, max_turns=2, temperature=0.8, seed=0)
    return RolloutEngine(backend, chat, get_parser("hermes"), [], math_equal, settings)


TASKS = [{"question": "3 * 4?", "answer": "12"}, {"question": "2 + 3?", "answer": "5"}]


def test_a_greedy_chain_per_task_after_its_samples(chat):
    engine = engine_of(chat, n=3)
    trajectories = asyncio.run(engine.run(TASKS, batch_id="s1", greedy=True))
    order = [(t.task_index, t.sample_index) for t in trajectories]
    assert order == [(task, sample) for task in (0, 1) for sample in range(4)]
    greedy = [t for t in trajectories if t.meta.get("greedy")]
    assert [(t.task_index, t.sample_index) for t in greedy] == [(0, 3), (1, 3)]
    assert [t.group_id for t in greedy] == ["s1:0", "s1:1"]  # in its task's group
    assert [t.reward for t in greedy] == [1.0, 0.0]  # scored like the others
    temperatures = engine.backend.temperatures
    assert {temperatures[key] for key in [(0, 3), (1, 3)]} == {0.0}
    assert {t for key, t in temperatures.items() if key[1] < 3} == {0.8}


def test_without_greedy_nothing_changes(chat):
    engine = engine_of(chat, n=2)
    trajectories = asyncio.run(engine.run(TASKS))
    assert len(trajectories) == 4
    assert not any("greedy" in t.meta for t in trajectories)
    assert set(engine.backend.temperatures.values()) == {0.8}
