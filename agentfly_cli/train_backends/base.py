"""The train backend protocol and what its implementations share.

A train backend owns the policy model, its optimizer and LR schedule. The trainer runs forward
passes through ``backend.model``, calls ``backward(loss)`` once per micro-batch and ``step()``
once per optimizer step, and asks for the weights (``sync_weights``) to push them to the
rollout backend.
"""

from __future__ import annotations

import abc
import contextlib
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentfly_cli.errors import UserError
from agentfly_cli.runtime.devices import pick_device, pick_dtype
from agentfly_cli.settings.train_backend import LoraSettings, TrainBackendSettings

if TYPE_CHECKING:
    import torch

__all__ = [
    "LoraSettings",
    "TrainBackend",
    "TrainBackendSettings",
    "atomic_torch_save",
    "iter_weights",
    "load_hf_weights",
    "lr_factor",
    "resolve_dtype",
]

#: Prefix that PEFT puts before the base model's parameter names.
PEFT_PREFIX = "base_model.model."

#: Gathers partitioned parameters (ZeRO-3) for the duration of a ``with`` block.
Gather = Callable[[list], contextlib.AbstractContextManager]


# ---- settings -------------------------------------------------------------------------------


def resolve_device(name: str) -> torch.device:
    """The train backend's device (``trainer.backend.device``)."""
    return pick_device(name, "trainer.backend.device")


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """The train backend's dtype: float32 or bfloat16 (``auto``: bfloat16 on a CUDA device that
    supports it)."""
    return pick_dtype(name, device, "trainer.backend.dtype", ("float32", "bfloat16"))


def check_schedule(config: TrainBackendSettings) -> None:
    """A decaying schedule needs to know where it ends."""
    if config.lr_schedule != "constant" and config.total_steps is None:
        raise UserError(
            f"lr_schedule {config.lr_schedule!r} needs total_steps (the optimizer steps of the "
            "run); set trainer.backend.total_steps or use lr_schedule: constant"
        )


def lr_factor(step: int, config: TrainBackendSettings) -> float:
    """The LR multiplier for optimizer step ``step`` (0-based).

    Warmup ramps linearly: step s < warmup_steps gets (s + 1) / warmup_steps, so the first
    step already learns. After warmup, ``constant`` stays at 1; ``linear`` and ``cosine`` go
    from 1 at step warmup_steps down to min_lr_ratio at step total_steps (and stay there).
    """
    warmup = config.warmup_steps
    if step < warmup:
        return (step + 1) / warmup
    if config.lr_schedule == "constant":
        return 1.0
    total = config.total_steps or 0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    floor = config.min_lr_ratio
    if config.lr_schedule == "linear":
        return floor + (1.0 - floor) * (1.0 - progress)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_scheduler(optimizer: Any, config: TrainBackendSettings):
    """A ``LambdaLR`` over ``lr_factor``; step it once per applied optimizer step."""
    from torch.optim.lr_scheduler import LambdaLR

    check_schedule(config)
    return LambdaLR(optimizer, lambda step: lr_factor(step, config))


# ---- the model ------------------------------------------------------------------------------


def load_reference_model(model_path: Any, train: Any) -> Any:
    """The frozen reference policy for the KL terms: ``model_path`` in the policy's dtype, on
    its device, in eval mode, without gradients."""
    dtype = next(train.unwrapped().parameters()).dtype
    reference = load_hf_model(model_path, dtype)
    return reference.to(train.device).eval().requires_grad_(False)


def load_hf_model(model_path: str | Path, dtype: torch.dtype):
    """``AutoModelForCausalLM.from_pretrained`` with a one-line UserError on failure."""
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(str(model_path), dtype=dtype)
    except (OSError, ValueError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise UserError(
            f"train backend: cannot load a model from {str(model_path)!r} "
            f"({type(exc).__name__}: {first}); pass a folder with config.json and weights"
        ) from exc


def prepare_model(model: Any, config: TrainBackendSettings):
    """Gradient checkpointing, LoRA adapters, then the frozen parameters
    (``config.freeze``); returns the model to train (train mode)."""
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if config.lora is not None:
        from agentfly_cli.train_backends.lora import wrap_lora

        model = wrap_lora(model, config.lora, gradient_checkpointing=config.gradient_checkpointing)
    if config.freeze:
        freeze_parameters(model, config.freeze)
    model.train()
    return model


def freeze_parameters(model: Any, patterns: list[str]) -> None:
    """Stop training the parameters whose base-model name matches a glob in ``patterns``; a
    pattern that matches none is a UserError."""
    from fnmatch import fnmatchcase

    unused = list(patterns)
    for name, param in model.named_parameters(remove_duplicate=False):
        hits = [p for p in patterns if fnmatchcase(strip_prefix(name), p)]
        if hits:
            param.requires_grad_(False)
            unused = [p for p in unused if p not in hits]
    if unused:
        raise UserError(
            f"trainer.backend.freeze: {unused[0]!r} matches no parameter of the model (names "
            "look like 'model.layers.0.mlp.up_proj.weight'); fix or remove the pattern"
        )


def trainable_parameters(model: Any) -> list:
    """The parameters the optimizer updates (adapters only under LoRA)."""
    return [p for p in model.parameters() if p.requires_grad]


def strip_prefix(name: str) -> str:
    """A PEFT parameter name in the base model's naming."""
    return name.removeprefix(PEFT_PREFIX)


def iter_weights(
    root: Any, *, gather: Gather | None = None, merge_lora: bool = False, prefix: str = ""
) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` for every parameter and persistent buffer, in state_dict order.

    Tied weights appear under each of their names, as in ``state_dict()``. ``gather`` makes
    partitioned (ZeRO-3) parameters whole for each module in turn: a yielded tensor is valid
    only until the generator resumes, so copy what you keep. ``merge_lora`` folds each LoRA
    layer into its base weight (the name of the base layer's weight, adapters skipped).
    """
    if merge_lora:
        from agentfly_cli.train_backends.lora import is_lora_layer, merged_layer_weights

        if is_lora_layer(root):
            yield from merged_layer_weights(root, prefix, gather)
            return
    params = list(root.named_parameters(recurse=False))
    context = gather([p for _, p in params]) if gather and params else contextlib.nullcontext()
    with context:
        for name, param in params:
            yield prefix + name, param.detach()
    skip = getattr(root, "_non_persistent_buffers_set", set())
    for name, buf in root.named_buffers(recurse=False):
        if name not in skip:
            yield prefix + name, buf.detach()
    for name, child in root.named_children():
        yield from iter_weights(
            child, gather=gather, merge_lora=merge_lora, prefix=f"{prefix}{name}."
        )


def tied_names(model: Any) -> set[str]:
    """Names of parameters that alias an earlier one (a tied lm_head), in base-model naming."""
    seen: set[int] = set()
    tied = set()
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen:
            tied.add(strip_prefix(name))
        seen.add(id(param))
    return tied


def base_config(model: Any):
    """The Hugging Face config of the base model (under PEFT too)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    return inner.config, getattr(inner, "generation_config", None)


def write_hf_folder(folder: str | Path, weights: dict, model: Any) -> None:
    """Write a Hugging Face model folder: safetensors shards, config, generation config.

    ``weights`` are in base-model names; tied aliases are left out, as ``save_pretrained`` does.
    """
    from huggingface_hub import save_torch_state_dict

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    skip = tied_names(model)
    state = {name: _writable(t) for name, t in weights.items() if name not in skip}
    save_torch_state_dict(state, str(folder), max_shard_size="5GB", metadata={"format": "pt"})
    config, generation = base_config(model)
    config.save_pretrained(str(folder))
    if generation is not None:
        generation.save_pretrained(str(folder))


def _writable(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as safetensors writes it: on the CPU, owning its whole storage. Only the
    tensors that are not get copied (ZeRO keeps parameters as views of flat buffers, which
    safetensors refuses); a copy of every weight would add the model's size to peak memory."""
    tensor = tensor.detach()
    owns_storage = (
        tensor.is_contiguous()
        and tensor.storage_offset() == 0
        and tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
    )
    if tensor.device.type == "cpu" and owns_storage:
        return tensor
    return tensor.to("cpu", copy=True).contiguous()


def load_hf_weights(folder: str | Path, device: Any = "cpu") -> dict[str, torch.Tensor]:
    """The weights of a Hugging Face folder's safetensors files (one or sharded), by name."""
    from safetensors.torch import load_file

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise UserError(
            f"no model weights (*.safetensors) in {str(folder)!r}: the checkpoint is "
            "incomplete; resume from an earlier one or start without --resume"
        )
    weights: dict[str, torch.Tensor] = {}
    for file in files:
        weights.update(load_file(str(file), device=str(device)))
    return weights


def atomic_torch_save(obj: Any, path: str | Path) -> None:
    """``torch.save`` to a temp file in the same folder, then ``os.replace`` onto ``path``."""
    import torch

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(obj, handle)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


# ---- the protocol ---------------------------------------------------------------------------


class TrainBackend(abc.ABC):
    """The policy under training: forward through ``model``, then ``backward`` and ``step``."""

    name: str
    model: Any  # call this for forward passes (DeepSpeed engine, PEFT model or HF model)
    device: torch.device
    is_main: bool = True
    world_size: int = 1
    rank: int = 0
    config: TrainBackendSettings
    #: The hf rollout backend may sample from ``unwrapped()`` itself (no weight copies).
    shares_model: bool = False
    #: Gradients are summed into each weight's ``.grad`` and read only at ``step()``; a backend
    #: that takes them from a hook as they are accumulated (DeepSpeed ZeRO) says False.
    plain_grad_accumulation: bool = False

    @abc.abstractmethod
    def unwrapped(self) -> Any:
        """The underlying model: the HF model, or the PEFT model under LoRA."""

    @abc.abstractmethod
    def backward(self, loss: torch.Tensor) -> None:
        """Accumulate the gradients of one micro-batch (``loss`` already scaled)."""

    @abc.abstractmethod
    def step(self) -> float:
        """Clip, apply and clear the accumulated gradients; the grad norm before clipping.

        A non-finite norm skips the update (and the LR schedule's step) and is returned.
        """

    @abc.abstractmethod
    def current_lr(self) -> float:
        """The learning rate the next ``step()`` applies."""

    @abc.abstractmethod
    def sync_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The policy weights for the rollout backend, in the base HF model's names."""

    @abc.abstractmethod
    def model_state(self) -> dict[str, torch.Tensor]:
        """The trained model's full state (PEFT names and adapters under LoRA)."""

    @abc.abstractmethod
    def load_model_state(self, state: dict[str, torch.Tensor]) -> None:
        """Load what ``model_state`` returned."""

    @abc.abstractmethod
    def state_dict(self) -> dict:
        """Optimizer and LR schedule state (model weights are separate)."""

    @abc.abstractmethod
    def load_state_dict(self, state: dict) -> None:
        """Load what ``state_dict`` returned."""

    @abc.abstractmethod
    def save_checkpoint(
        self, folder: str | Path, *, model_folder: str | Path | None = None
    ) -> None:
        """Write everything needed to resume (weights, optimizer, schedule) into ``folder``.

        ``model_folder``: where :meth:`save_model` has just written the model; a backend may
        read the weights back from there instead of storing them twice.
        """

    @abc.abstractmethod
    def load_checkpoint(self, folder: str | Path) -> None:
        """Resume from a folder that ``save_checkpoint`` wrote."""

    @abc.abstractmethod
    def save_model(self, folder: str | Path) -> None:
        """A Hugging Face model folder (merged full weights under LoRA)."""

    def save_adapter(self, folder: str | Path) -> None:
        """The LoRA adapter as a PEFT folder (LoRA only)."""
        raise UserError("save_adapter needs LoRA training (trainer.backend.lora)")

    def barrier(self) -> None:  # noqa: B027 - single process: nothing to wait for
        """Wait for every rank."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the model and optimizer."""
