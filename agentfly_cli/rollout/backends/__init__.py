"""LLM backends: token ids in, sampled token ids and logprobs out."""

from agentfly_cli.rollout.backends.base import (
    Backend,
    BackendConfig,
    BackendUnavailableError,
    Generation,
    RequestContext,
    SamplingParams,
)

__all__ = [
    "Backend",
    "BackendConfig",
    "BackendUnavailableError",
    "Generation",
    "RequestContext",
    "SamplingParams",
]
