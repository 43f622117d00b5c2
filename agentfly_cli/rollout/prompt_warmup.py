"""The first prompts of a batch's rows that bring their own tools, tokenized ahead of the
chains in one batch: each row's tool list is new text, and ``encode_batch`` takes it on every
core; each chain's ``render_prompt`` is then cache lookups, with the same ids."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentfly_cli.rollout.tasks import opening_messages


def warm_first_prompts(engine: Any, tasks: Sequence[Mapping[str, Any]]) -> int:
    """Warm ``engine``'s template cache with the first prompts of ``tasks`` whose tool set is
    their own (not the run's); rows an env opens are skipped (their prompt comes at reset).
    Returns the pieces encoded."""
    task_tools = engine.task_tools
    if engine.settings.opening_env or not task_tools.field:
        return 0
    prompts = []
    for task in tasks:
        tools = task_tools.for_task(task)
        if tools is not task_tools.base:
            messages = opening_messages(task, engine.system_prompt, engine.examples)
            prompts.append((messages, tools.schemas))
    return engine.chat.warm_prompts(prompts) if prompts else 0
