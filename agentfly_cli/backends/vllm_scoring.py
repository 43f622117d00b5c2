"""Scoring given token ids with the ``vllm`` backend's engine (prompt logprobs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def prompt_values(prompt_logprobs: Any, ids: list[int]) -> list[float]:
    """The logprob of each token after the first from vLLM's ``prompt_logprobs`` (one entry
    per prompt token, None first; each maps token ids, the prompt's own among them, to a
    ``Logprob``)."""
    values = []
    for entry, token in zip(list(prompt_logprobs)[1:], ids[1:], strict=True):
        item = entry[token]
        values.append(float(getattr(item, "logprob", item)))
    return values


def score_call(
    vllm: Any, prompt: Callable[[list[int]], Any], sequences: list[list[int]], tag: str
) -> Callable[[Any], list[list[float]]]:
    """A function of the engine (run on its thread, with no request running) that adds one
    request per sequence with ``prompt_logprobs=0`` and one new token, steps the engine until
    they finish, and returns their prompt logprobs, in order."""

    def run(engine: Any) -> list[list[float]]:
        params = vllm.SamplingParams(
            max_tokens=1, temperature=0.0, prompt_logprobs=0, detokenize=False
        )
        ids = [f"agentfly-probe-{tag}-{i}" for i in range(len(sequences))]
        for request_id, sequence in zip(ids, sequences, strict=True):
            engine.add_request(request_id, prompt(sequence), params)
        finished: dict[str, Any] = {}
        while engine.has_unfinished_requests():
            for output in engine.step():
                if output.finished:
                    finished[output.request_id] = output
        return [
            prompt_values(finished[rid].prompt_logprobs, seq)
            for rid, seq in zip(ids, sequences, strict=True)
        ]

    return run
