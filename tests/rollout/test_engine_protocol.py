"""Both engines, the recipe's and the agent program's, are the one :class:`Engine` callers use."""

from __future__ import annotations

import inspect

import pytest

from agentfly_cli.backends.scripted import ScriptedBackend
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.envs.manager import ResourceManager
from agentfly_cli.rollout.agent_engine import AgentEngine
from agentfly_cli.rollout.engine import RolloutEngine
from agentfly_cli.rollout.engine_protocol import Engine
from agentfly_cli.settings.agent import AgentSettings
from agentfly_cli.settings.rollout import RolloutSettings


@pytest.fixture(scope="module")
def engines(tiny_model) -> list:
    chat = ChatTemplate.load(str(tiny_model))
    settings, parser = RolloutSettings(n=2), get_parser("hermes")
    recipe = RolloutEngine(ScriptedBackend([], chat), chat, parser, [], None, settings)
    agent = AgentEngine(
        ScriptedBackend([], chat), chat, parser, lambda task, base_url: 1.0, None, settings,
        AgentSettings(entry="x:y"), env_manager=ResourceManager({}), meta={"agent": "x:y"},
    )  # fmt: skip
    return [recipe, agent]


def test_both_engines_are_engines(engines):
    for engine in engines:
        assert isinstance(engine, Engine), type(engine).__name__
        assert engine.sampled_tokens == 0 and engine.settings.n == 2
        assert isinstance(engine.envs, ResourceManager) and isinstance(engine.meta, dict)


def test_run_takes_what_callers_pass(engines):
    """``run``'s parameters are the protocol's, by name, kind and default, in both engines."""
    wanted = inspect.signature(Engine.run).parameters
    for engine in engines:
        assert inspect.iscoroutinefunction(engine.run)
        have = inspect.signature(type(engine).run).parameters
        assert [(p.name, p.kind, p.default) for p in have.values()] == [
            (p.name, p.kind, p.default) for p in wanted.values()
        ], type(engine).__name__


def test_an_object_without_run_is_not_an_engine(engines):
    class Half:
        backend = chat = settings = envs = meta = None
        sampled_tokens = 0

    assert not isinstance(Half(), Engine)
