"""LLM backends: token ids in, sampled token ids and logprobs out."""

from agentfly_cli.rollout.backends.base import (
    Backend,
    BackendUnavailableError,
    Generation,
    RequestContext,
    SamplingParams,
)
from agentfly_cli.settings.rollout import BackendSettings

__all__ = [
    "Backend",
    "BackendSettings",
    "BackendUnavailableError",
    "Generation",
    "RequestContext",
    "SamplingParams",
]
