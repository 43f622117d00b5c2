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
        "episode against base_url (sync functions in threads, async ones on the loop) and "
        "returns its final answer (scored by the run's reward) or a reward (a number)",
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
        64, ge=1, description="episodes running at once (sync agents each take a thread)"
    )
