"""Where and how the policy is optimized: ``trainer.backend`` (and ``sft``'s backend)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class LoraSettings(BaseModel):
    """LoRA adapters (PEFT) instead of full fine-tuning."""

    model_config = ConfigDict(extra="forbid")

    r: int = Field(16, ge=1, description="adapter rank")
    alpha: int = Field(32, ge=1, description="scaling numerator (scale = alpha / r)")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="dropout on the adapter input")
    target_modules: list[str] | str = Field(
        "all-linear", description="module names to adapt, or all-linear"
    )


class TrainBackendSettings(BaseModel):
    """Where and how the policy is optimized."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        "torch", description="torch, deepspeed, or a plugin's (register_train_backends)"
    )
    device: str = Field("auto", description="torch: cpu, cuda, cuda:N or auto")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="auto: bfloat16 on CUDA with bf16 support, else float32"
    )
    lr: float = Field(1e-5, gt=0, allow_inf_nan=False, description="peak learning rate")
    weight_decay: float = Field(0.0, ge=0, allow_inf_nan=False, description="AdamW weight decay")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas")
    eps: float = Field(1e-8, gt=0, allow_inf_nan=False, description="AdamW epsilon")
    max_grad_norm: float | None = Field(1.0, gt=0, description="clip the global grad norm")
    lr_schedule: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="after warmup: constant, linear or cosine decay"
    )
    warmup_steps: int = Field(0, ge=0, description="optimizer steps of linear warmup")
    total_steps: int | None = Field(
        None, ge=1, description="optimizer steps of the run (the trainer fills it)"
    )
    min_lr_ratio: float = Field(0.0, ge=0, le=1, description="decay floor, a fraction of lr")
    gradient_checkpointing: bool = Field(False, description="recompute activations in backward")
    zero_stage: int = Field(2, ge=0, le=3, description="deepspeed: ZeRO stage 0-3")
    offload_optimizer: bool = Field(False, description="deepspeed: optimizer state on the CPU")
    lora: LoraSettings | None = Field(None, description="LoRA adapters; None: full fine-tuning")
    sync: Literal["merge", "adapter"] = Field(
        "merge", description="LoRA weight sync: merged full weights, or the adapters only"
    )
    delta_sync: bool = Field(
        True,
        description="full pushes send only the tensors whose checksum changed since the last "
        "push (frozen layers, untouched embeddings stay); backends that need every weight "
        "(vllm) get all of them",
    )
    freeze: list[str] = Field(
        default_factory=list,
        description="glob patterns of parameter names (base-model names, e.g. "
        "'model.embed_tokens.*', 'model.layers.0.*') that are not trained",
    )
