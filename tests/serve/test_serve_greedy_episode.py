"""A greedy episode (ReMax's baseline through the gateway): every request of it is sampled at
temperature 0, whatever the agent asks and whatever the rollout's settings; other sessions are
sampled as they were."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from agentfly_cli.backends.base import Backend, Generation
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.serve.gateway import Gateway

HI = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0.7, "top_p": 0.9}


class Recorded(Backend):
    """Answers "ok" and keeps the sampling settings of each request."""

    name = "recorded"

    def __init__(self, chat: ChatTemplate) -> None:
        self.chat, self.params = chat, []

    async def generate(self, prompt_ids, params, context=None):
        self.params.append(params)
        ids = self.chat.encode_response("ok")
        return Generation(ids, [-0.5] * len(ids), "stop")


@pytest.fixture
def tiny_chat(tiny_model):
    return ChatTemplate.load(str(tiny_model))


@pytest.mark.parametrize("rollout", [None, SimpleNamespace(temperature=1.0, top_p=0.8, top_k=5,
                                                           max_tokens_per_turn=8)])  # fmt: skip
def test_a_greedy_episode_samples_at_temperature_zero(tiny_chat, rollout):
    backend = Recorded(tiny_chat)
    gateway = Gateway(backend, tiny_chat, get_parser("hermes"), "m", sampling=rollout,
                      open_on_request=False)  # fmt: skip
    gateway.open_episode("greedy", task_index=0, greedy=True)
    gateway.open_episode("sampled", task_index=0)

    async def both():
        await gateway.complete("greedy", dict(HI))
        await gateway.complete("sampled", dict(HI))

    asyncio.run(both())
    greedy, sampled = backend.params
    assert (greedy.temperature, greedy.top_p, greedy.top_k) == (0.0, 1.0, 0)
    expected = (0.7, 0.9, 0) if rollout is None else (1.0, 0.8, 5)
    assert (sampled.temperature, sampled.top_p, sampled.top_k) == expected
    assert greedy.max_tokens == sampled.max_tokens  # only the sampling changes
