"""The ``scripted`` backend: replays assistant responses from a JSONL file.

Line i of the script is ``{"responses": ["...", "..."]}``: the assistant turns that every chain
of task i replays in order. A line with an ``"id"`` serves the task row of that id instead,
wherever the row is in the run's tasks (a recipe's held-out split, ``--where`` and ``--limit``
change which rows a run reads, not which solution each row gets). With ``--agent`` each
episode's requests come with its task's index and id (the gateway's
:meth:`~agentfly_cli.serve.capture.Episode.request_context`), the k-th request of an episode
being turn k. Each response is encoded as if sampled, ending with the end-of-turn token that the
chat template expects. It serves tests, debugging of parsers and templates, demos and
``agentfly recipes check``. It has no model, so it returns no logprobs.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentfly_cli.backends.base import Backend, Generation, RequestContext, SamplingParams
from agentfly_cli.errors import UserError
from agentfly_cli.settings.rollout import BackendSettings


class Script(list):
    """The responses of each script line, in order; ``by_id`` those of lines that give an id."""

    def __init__(self) -> None:
        super().__init__()
        self.by_id: dict[str, list[str]] = {}


def load_script(path: str | Path) -> Script:
    """Read a script file: one ``{"responses": [...]}`` object (with an optional ``"id"``) per
    line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"script file {str(path)!r} not found; pass --script FILE.jsonl")
    script = Script()
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
            if row.get("id") is not None:
                script.by_id[str(row["id"])] = responses
    return script


class ScriptedBackend(Backend):
    """Replays the script's responses by task index and turn."""

    name = "scripted"

    def __init__(self, script: list[list[str]] | Script, chat) -> None:
        self.script = script
        self.chat = chat
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def from_config(cls, config: BackendSettings, chat) -> ScriptedBackend:
        if not config.script:
            raise UserError("the scripted backend needs a script: pass --script FILE.jsonl")
        return cls(load_script(config.script), chat)

    def _responses(self, context: RequestContext) -> list[str]:
        by_id = getattr(self.script, "by_id", None)
        if by_id:
            if context.task_id is None or context.task_id not in by_id:
                raise UserError(
                    f"the script's lines have ids, but none is {context.task_id!r} (task "
                    f"{context.task_index}); give a line for every task id"
                )
            return by_id[context.task_id]
        if context.task_index >= len(self.script):
            raise UserError(
                f"the script has {len(self.script)} lines but task {context.task_index} was asked "
                'for; give one line per data row (or an "id" on each line)'
            )
        return self.script[context.task_index]

    def _encode(self, text: str) -> list[int]:
        ids = self._cache.get(text)
        if ids is None:
            ids = self._cache[text] = list(self.chat.encode_response(text))
        return ids

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, context: RequestContext | None = None
    ) -> Generation:
        context = context or RequestContext()
        responses = self._responses(context)
        if context.turn >= len(responses):
            line = (
                f"the script line of task id {context.task_id}"
                if getattr(self.script, "by_id", None)
                else f"script line {context.task_index + 1}"
            )
            raise UserError(
                f"{line} has {len(responses)} responses but turn {context.turn + 1} was asked "
                "for; add responses or lower --max-turns"
            )
        ids = self._encode(responses[context.turn])
        if len(ids) > params.max_tokens:
            return Generation(ids[: params.max_tokens], None, "length")
        return Generation(list(ids), None, "stop")
