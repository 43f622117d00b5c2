"""The vllm backend's prompt scoring, against a fake engine shaped like vLLM's (vLLM itself is
not installed on the CPU test machines; tests/backends/test_backend_vllm.py runs it where it is)."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from agentfly_cli.backends.vllm_scoring import prompt_values, score_call


@dataclass
class Logprob:
    logprob: float


class FakeEngine:
    """Finishes each request after one step; prompt logprobs are -0.1 * token id."""

    def __init__(self) -> None:
        self.requests: dict[str, list[int]] = {}
        self.params = []

    def add_request(self, request_id, prompt, params):
        self.requests[request_id] = prompt["prompt_token_ids"]
        self.params.append(params)

    def has_unfinished_requests(self):
        return bool(self.requests)

    def step(self):
        outputs = [
            SimpleNamespace(
                request_id=rid,
                finished=True,
                # None for the first token; each entry holds the prompt's own token (and more)
                prompt_logprobs=[None]
                + [{t: Logprob(-0.1 * t), t + 1: Logprob(-9.0)} for t in ids[1:]],
            )
            for rid, ids in reversed(list(self.requests.items()))  # out of order
        ]
        self.requests = {}
        return outputs


def test_score_call_returns_each_sequences_prompt_logprobs_in_order():
    engine = FakeEngine()
    vllm = SimpleNamespace(SamplingParams=lambda **kw: kw)
    run = score_call(vllm, lambda ids: {"prompt_token_ids": ids}, [[1, 2, 3], [4, 5]], "t")
    assert run(engine) == [[pytest.approx(-0.2), pytest.approx(-0.3)], [pytest.approx(-0.5)]]
    assert engine.params[0]["prompt_logprobs"] == 0 and engine.params[0]["max_tokens"] == 1


def test_prompt_values_picks_the_prompt_token_not_the_top_one():
    entries = [None, {7: Logprob(-1.5), 3: Logprob(-0.2)}]
    assert prompt_values(entries, [0, 7]) == [-1.5]
