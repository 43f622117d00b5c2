"""The ``agent`` section: an agent program, run through the gateway, instead of the engine's
own turn loop (``agentfly train --agent path.py:fn``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class AgentSettings(BaseModel):
    """Any agent code that talks to an OpenAI-compatible endpoint."""

    model_config = ConfigDict(extra="forbid")

    entry: str = Field(
        ...,
        description="the agent function, file.py:fn or module:fn: fn(task, base_url) runs one "
        "episode against base_url (each on a thread of its own; async ones on their own event "
        "loop there) and returns its final answer (scored by the run's reward) or a reward (a "
        "finite number)",
    )
    timeout_s: float = Field(
        600.0, gt=0, allow_inf_nan=False, description="one episode; past it, the episode fails"
    )
    sampling: str = Field(
        "rollout",
        pattern="^(rollout|agent)$",
        description="rollout: rollout.temperature, top_p and top_k replace the agent's, and "
        "rollout.max_tokens_per_turn caps its max_tokens (what RL explores with); agent: the "
        "agent's own request settings",
    )
    concurrency: int = Field(
        64, ge=1, description="episodes running at once (each runs on a thread of its own)"
    )
    grace_s: float = Field(
        2.0,
        ge=0,
        allow_inf_nan=False,
        description="after agent.timeout_s, how long an episode's agent gets to stop (an async "
        "one is cancelled) before its thread is abandoned: it runs on, but holds no slot and is "
        "not waited for at exit",
    )
    max_abandoned: int = Field(
        32,
        ge=0,
        description="abandoned agent threads (hung past agent.timeout_s) that may still run at "
        "once; one more fails the run",
    )
