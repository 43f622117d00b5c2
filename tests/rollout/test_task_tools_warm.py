"""warm_first_prompts: the first prompts of rows with their own tools, tokenized in one
batch ahead of the rollout, give exactly the ids of the uncached path (real tokenizers)."""

from __future__ import annotations

import asyncio

import pytest

from agentfly_cli.backends.scripted import ScriptedBackend
from agentfly_cli.chat.parsers import get_parser
from agentfly_cli.chat.templates import ChatTemplate
from agentfly_cli.rollout.engine import RolloutEngine
from agentfly_cli.rollout.prompt_warmup import warm_first_prompts
from agentfly_cli.rollout.tasks import opening_messages
from agentfly_cli.settings.rollout import RolloutSettings
from tests.helpers.realdata_paths import find_tokenizer, missing_reason

CASES = [("qwen2.5", None, "hermes"), ("qwen3", "qwen3_coder", "qwen3_coder")]


def rows(count: int) -> list[dict]:
    out = []
    for i in range(count):
        functions = [
            {
                "name": f"geo.area_{i}_{k}",
                "description": f'Area of shape {i}/{k}, ünïcödé 日本語 "quoted"  spaced.',
                "parameters": {
                    "type": "dict",
                    "properties": {"base": {"type": "float"}, "tags": {"type": "tuple"}},
                    "required": ["base"],
                },
            }
            for k in range(1 + i % 3)
        ]
        out.append({"question": f"Question {i}: the area?", "function": functions})
    return out


def engine_for(folder, template, parser) -> RolloutEngine:
    chat = ChatTemplate.load(str(folder), template)
    return RolloutEngine(
        ScriptedBackend([["done"]], chat), chat, get_parser(parser), [], None,
        RolloutSettings(n=1, max_turns=1), system_prompt="Be brief.", tools_field="function",
    )  # fmt: skip


@pytest.mark.parametrize(("name", "template", "parser"), CASES)
def test_warmed_prompts_are_the_uncached_ids(name, template, parser):
    folder = find_tokenizer(name)
    if folder is None:
        pytest.skip(missing_reason())
    tasks = rows(12)
    cold, warm = engine_for(folder, template, parser), engine_for(folder, template, parser)
    assert warm_first_prompts(warm, tasks) > 0
    encoder = warm.chat._encoder

    def no_encode(text):  # after the warm-up, a prompt is cache lookups only
        raise AssertionError(f"encoded again: {text[:60]!r}")

    def no_render(*args):  # ... and its ids are kept: not even rendered again
        raise AssertionError("rendered again")

    encoder._backend_ids = encoder._new_ids = no_encode
    warm.chat._framed = no_render
    for task in tasks:
        messages = opening_messages(task, "Be brief.")
        tools = warm.task_tools.for_task(task)
        ids = warm.chat.render_prompt(messages, tools.schemas)
        cold_tools = cold.task_tools.for_task(task).schemas
        assert ids == cold.chat.render_prompt(messages, cold_tools)
        text = cold.chat.render_text(messages, cold_tools, add_generation_prompt=True)
        assert ids == list(cold.chat.tokenizer.encode(text, add_special_tokens=False))
    assert warm_first_prompts(warm, tasks) == 0  # all cached: nothing encoded twice


def test_run_warms_before_its_chains(monkeypatch):
    folder = find_tokenizer("qwen2.5")
    if folder is None:
        pytest.skip(missing_reason())
    engine = engine_for(folder, None, "hermes")
    seen = []
    monkeypatch.setattr(engine.chat, "warm_prompts", lambda prompts: seen.append(prompts) or 0)
    tasks = rows(3) + [{"question": "no tools"}]
    asyncio.run(engine.run(tasks))
    assert [len(p) for p in seen] == [3]  # the rows that bring tools, in one batch
    assert seen[0][0][1][-1]["function"]["name"] == "geo.area_0_0"
