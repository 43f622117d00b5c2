"""Rollout settings: how many chains, how long, how they sample."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class RolloutSettings(BaseModel):
    """Limits and sampling of the chains of one rollout."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(4, ge=1, description="chains per task (a group)")
    max_turns: int = Field(4, ge=1, description="assistant turns per chain")
    max_tokens_per_turn: int = Field(256, ge=1, description="sampled tokens per assistant turn")
    max_total_tokens: int = Field(
        4096, ge=1, description="token budget of a whole chain, prompt included"
    )
    max_errors: int = Field(
        3, ge=1, description="stop a chain after this many error observations (error budget)"
    )
    max_calls_per_turn: int = Field(
        16,
        ge=1,
        description="tool calls run per assistant turn; more become one error observation",
    )
    stop: list[str] = Field(
        default_factory=list,
        description="end a turn at any sampled token whose text contains one of these "
        "(such as a newline); the token stays in the record and the end-of-turn token follows",
    )

    @field_validator("stop")
    @classmethod
    def _no_empty_stop(cls, stops: list[str]) -> list[str]:
        if any(not stop for stop in stops):
            raise ValueError('an empty stop string would end every turn at once; use e.g. "\\n"')
        return stops

    concurrency: int = Field(64, ge=1, description="chains in flight at once")
    temperature: float = Field(1.0, ge=0, description="sampling temperature; 0: greedy")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling; 1: off")
    top_k: int = Field(0, ge=0, description="0 = off")
    seed: int | None = Field(
        0,
        description="seeds sampling: each request derives its seed from this, the task, the "
        "chain and the turn (null: unseeded)",
    )
    tool_timeout: float | None = Field(None, gt=0, description="seconds; default: the tool's own")
    max_observation_chars: int | None = Field(
        None, ge=1, description="cut longer observations; default: the tool's own"
    )
    gc_threshold: int | None = Field(
        20_000,
        ge=0,
        description="garbage-collector first threshold while chains run (0: leave it alone)",
    )
