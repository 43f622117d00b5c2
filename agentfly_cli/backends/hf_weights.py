"""Loading a trainer's new weights or LoRA adapters into the ``hf`` backend's model."""

from __future__ import annotations

from typing import Any

from agentfly_cli.backends.base import BackendUnavailableError, unwrapped_names


def with_adapters(model: Any, config: Any) -> Any:
    """``model`` wrapped with PEFT for ``config`` (a LoraConfig or its dict), once."""
    try:
        import peft
    except ImportError as exc:
        raise BackendUnavailableError("LoRA adapters need PEFT: pip install 'peft>=0.13'") from exc
    if hasattr(model, "peft_config"):
        return model
    if isinstance(config, dict):
        config = peft.LoraConfig(**config)
    return peft.get_peft_model(model, config).eval()


def set_adapters(model: Any, tensors: Any) -> None:
    """Set a PEFT model's adapter tensors; a tensor that fits no adapter is an error."""
    import peft

    result = peft.set_peft_model_state_dict(model, dict(tensors))
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise ValueError(
            f"hf backend: {len(unexpected)} adapter tensor(s) do not fit the model, e.g. "
            f"{unexpected[0]!r}; push the adapters of the same LoRA config"
        )


def load_named_weights(model: Any, named_tensors: Any) -> int:
    """Copy ``named_tensors`` into ``model``, checking every name and shape first: a bad
    update changes nothing. Returns how many tensors were loaded."""
    import torch

    targets = model.state_dict(keep_vars=True)
    pairs = unwrapped_names(named_tensors)
    unknown = [name for name, _ in pairs if name not in targets]
    if unknown:
        raise ValueError(
            f"hf backend: {len(unknown)} weight(s) are not in the model, e.g. {unknown[0]!r}; "
            "pass the policy's own named_parameters() or state_dict()"
        )
    for name, tensor in pairs:
        if tuple(targets[name].shape) != tuple(tensor.shape):
            raise ValueError(
                f"hf backend: weight {name!r} has shape {tuple(tensor.shape)}, "
                f"the model expects {tuple(targets[name].shape)}"
            )
    with torch.no_grad():
        for name, tensor in pairs:
            target = targets[name]
            target.copy_(tensor.detach().to(device=target.device, dtype=target.dtype))
    return len(pairs)
