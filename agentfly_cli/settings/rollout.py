"""Rollout settings (``rollout:``: how many chains, how long, how they sample) and the
backend's (``backend:``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class TaskToolsSettings(BaseModel):
    """What a call to a tool a task row declares (data.tools_field, schemas only) does."""

    model_config = ConfigDict(extra="forbid")

    on_call: Literal["end", "mock", "env"] = Field(
        "end",
        description="end: the call is recorded (status ok) and the chain ends after that turn "
        "(finish declared_call); mock: the model reads the row's mock_results[NAME], else "
        "`mock`, and goes on; env: the call is sent to env.step of the env named by `env` as "
        '{"tool": NAME, "arguments": {...}}, and the step\'s result is the observation',
    )
    mock: str = Field(
        '{"status": "ok"}', description="on_call mock: the observation of a row tool's call"
    )
    env: str | None = Field(None, description="on_call env: the registered env that runs them")

    @model_validator(mode="after")
    def _env_mode_names_its_env(self) -> TaskToolsSettings:
        if self.on_call == "env" and not self.env:
            raise ValueError(
                "on_call: env needs rollout.task_tools.env, the registered env that runs the "
                "row's tools (e.g. task_tools: {on_call: env, env: my_env})"
            )
        return self


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
    no_call: Literal["answer", "error"] = Field(
        "answer",
        description="a turn with no tool call and no answer: 'answer' ends the chain with it "
        "as the answer (chat agents); 'error' gives the model a no_call error naming the "
        "expected format and the chain goes on, within max_errors (agents in an environment "
        "that only the environment or the limits end)",
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

    opening_env: str | None = Field(
        None,
        description="an env of the run that speaks first: each chain leases it before its "
        "first prompt, and what its reset(task) returns (a string, or a dict with "
        "'observation' and optional 'system_prompt', 'info', 'reward', 'done') is the first "
        "user message, in place of the row's question; null: the row's question or messages",
    )
    concurrency: int = Field(
        64, ge=1, description="chains in flight at once (at most the pool_max of an env in use)"
    )
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
    task_tools: TaskToolsSettings = Field(
        default_factory=TaskToolsSettings,
        description="tools that task rows bring (data.tools_field): what their calls do",
    )
    gc_threshold: int | None = Field(
        20_000,
        ge=0,
        description="garbage-collector first threshold while chains run (0: leave it alone)",
    )


class BackendSettings(BaseModel):
    """Settings shared by the built-in backends; each uses the fields it needs."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("hf", description="backend name: hf, vllm, openai, scripted, or a plugin's")
    model: str | None = Field(
        None,
        description="the model folder the backend loads: a run sets it from `model` (in "
        "settings, backend.model is a deprecated alias of model)",
    )
    tokenizer: str | None = Field(None, description="tokenizer folder, if not the model's")
    tokenizer_loader: Literal["auto", "transformers", "tokenizer.json"] = Field(
        "auto",
        description="how the tokenizer folder is read, for the chat layer and the backend alike: "
        "transformers (AutoTokenizer), tokenizer.json (the file as is), or auto (AutoTokenizer, "
        "unless it loses text and tokenizer.json as is does not, e.g. DeepSeek-V3 under "
        "transformers 5)",
    )
    device: str = Field("auto", description="hf: cpu, cuda, cuda:1 or auto")
    dtype: str = Field("auto", description="float32, bfloat16, float16 or auto")
    max_batch_size: int = Field(64, ge=1, description="hf: most requests in one forward pass")
    batch_wait_ms: float = Field(2.0, ge=0, description="hf: wait for more requests to batch")
    prefix_cache_tokens: int = Field(
        32768,
        ge=0,
        description="hf: KV of finished requests kept (in tokens) so that a chain's next turn "
        "prefills only its new tokens; 0 turns it off",
    )
    script: str | None = Field(None, description="scripted: JSONL of responses per task")
    base_url: str | None = Field(None, description="openai: server URL, e.g. http://host:8000/v1")
    api_key_env: str = Field("OPENAI_API_KEY", description="openai: env var with the API key")
    served_model: str | None = Field(None, description="openai: model name on the server")
    request_timeout: float = Field(120.0, gt=0, description="openai: seconds per request")
    gpu_memory_utilization: float = Field(0.4, gt=0, le=1, description="vllm")
    max_model_len: int | None = Field(None, description="vllm: context length")
    enforce_eager: bool = Field(True, description="vllm: no CUDA graphs / compile")
    seed: int = Field(
        0,
        description="hf: seeds the requests that carry no seed (rollout.seed: null); vllm: the "
        "engine's seed",
    )
