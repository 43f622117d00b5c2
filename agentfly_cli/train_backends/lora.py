"""LoRA adapters through PEFT: wrapping, merged weights on the fly, and the adapter tensors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.settings.train_backend import LoraSettings

INSTALL_HINT = "pip install 'peft>=0.13'"


def import_peft():
    """The ``peft`` module, or a one-line UserError naming the install."""
    try:
        import peft
    except ImportError:
        raise UserError(f"LoRA training needs PEFT: run `{INSTALL_HINT}`") from None
    return peft


def wrap_lora(model: Any, settings: LoraSettings, *, gradient_checkpointing: bool = False):
    """The PEFT model with fresh adapters; only the adapters train."""
    peft = import_peft()
    if gradient_checkpointing:
        model.enable_input_require_grads()
    config = peft.LoraConfig(
        r=settings.r,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=settings.target_modules,
        bias="none",
        task_type="CAUSAL_LM",
    )
    return peft.get_peft_model(model, config)


def is_peft_model(model: Any) -> bool:
    """Whether ``model`` is a PEFT wrapper (without importing peft when it is not)."""
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def is_lora_layer(module: Any) -> bool:
    """A PEFT LoRA layer (its ``base_layer`` holds the frozen weight)."""
    if not hasattr(module, "lora_A") or not hasattr(module, "base_layer"):
        return False
    from peft.tuners.lora import LoraLayer

    return isinstance(module, LoraLayer)


def merged_layer_weights(module: Any, prefix: str, gather=None) -> Iterator[tuple[str, Any]]:
    """The base layer's weights with the active adapters folded in (``W + scale * B @ A``).

    Names drop ``base_layer.``; the module itself is not changed.
    """
    import torch

    params = list(module.parameters())
    context = gather(params) if gather and params else contextlib.nullcontext()
    with context, torch.no_grad():
        base = module.base_layer
        for name, param in base.named_parameters(recurse=False):
            value = param.detach()
            if name == "weight" and not module.merged:
                for adapter in module.active_adapters:
                    if adapter in module.lora_A:
                        value = value + module.get_delta_weight(adapter).to(value.dtype)
            yield prefix + name, value
        skip = getattr(base, "_non_persistent_buffers_set", set())
        for name, buf in base.named_buffers(recurse=False):
            if name not in skip:
                yield prefix + name, buf.detach()


def lora_parameters(model: Any) -> list[tuple[str, Any]]:
    """``(peft name, parameter)`` of every adapter tensor."""
    return [(name, p) for name, p in model.named_parameters() if "lora_" in name]


def adapter_state(model: Any, tensors: dict[str, Any]) -> dict[str, Any]:
    """Adapter tensors (keyed by PEFT parameter names) renamed as PEFT saves them."""
    from peft.utils import get_peft_model_state_dict

    return get_peft_model_state_dict(model, state_dict=tensors, save_embedding_layers=False)


def save_adapter_folder(model: Any, folder, tensors: dict[str, Any]) -> None:
    """A PEFT adapter folder (adapter_config.json, adapter_model.safetensors)."""
    model.save_pretrained(str(folder), state_dict=tensors, save_embedding_layers=False)
