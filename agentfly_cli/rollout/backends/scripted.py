"""The ``scripted`` backend: replays assistant responses from a JSONL file.

Line i of the script is ``{"responses": ["...", "..."]}``: the assistant turns that every chain
of task i replays in order. Each response is encoded as if sampled, ending with the end-of-turn
token that the chat template expects. It serves tests, debugging of parsers and templates, and
demos. It has no model, so it returns no logprobs.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentfly_cli.errors import UserError
from agentfly_cli.rollout.backends.base import (
    Backend,
    BackendConfig,
    Generation,
    RequestContext,
    SamplingParams,
)


def load_script(path: str | Path) -> list[list[str]]:
    """Read a script file: one ``{"responses": [...]}`` object per line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"script file {str(path)!r} not found; pass --script FILE.jsonl")
    script: list[list[str]] = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise UserError(
                    f"{path}:{number}: not JSON ({exc.msg}); write one object per line"
                ) from None
            responses = row.get("responses") if isinstance(row, dict) else None
            if not isinstance(responses, list) or not all(isinstance(r, str) for r in responses):
                raise UserError(
                    f'{path}:{number}: expected {{"responses": ["...", ...]}}, a list of strings'
                )
            script.append(responses)
    return script


class ScriptedBackend(Backend):
    """Replays the script's responses by task index and turn."""

    name = "scripted"

    def __init__(self, script: list[list[str]], chat) -> None:
        self.script = script
        self.chat = chat
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def from_config(cls, config: BackendConfig, chat) -> ScriptedBackend:
        if not config.script:
            raise UserError("the scripted backend needs a script: pass --script FILE.jsonl")
        return cls(load_script(config.script), chat)

    def _encode(self, text: str) -> list[int]:
        ids = self._cache.get(text)
        if ids is None:
            ids = self._cache[text] = list(self.chat.encode_response(text))
        return ids

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, context: RequestContext | None = None
    ) -> Generation:
        context = context or RequestContext()
        if context.task_index >= len(self.script):
            raise UserError(
                f"the script has {len(self.script)} lines but task {context.task_index} was asked "
                "for; give one line per data row"
            )
        responses = self.script[context.task_index]
        if context.turn >= len(responses):
            raise UserError(
                f"script line {context.task_index + 1} has {len(responses)} responses but turn "
                f"{context.turn + 1} was asked for; add responses or lower --max-turns"
            )
        ids = self._encode(responses[context.turn])
        if len(ids) > params.max_tokens:
            return Generation(ids[: params.max_tokens], None, "length")
        return Generation(list(ids), None, "stop")
