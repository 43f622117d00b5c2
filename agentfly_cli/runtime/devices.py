"""Devices and dtypes from settings (``auto``, ``cpu``, ``cuda:1``; ``bfloat16``), for the hf
rollout backend and the train backends alike. Imports torch only when called."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentfly_cli.errors import UserError

if TYPE_CHECKING:
    import torch

DTYPES = ("float32", "bfloat16", "float16")


def pick_device(name: str, setting: str) -> torch.device:
    """``auto``: cuda when available, else cpu. CUDA asked for without CUDA, or a name torch does
    not know, is a one-line error naming ``setting`` (e.g. ``trainer.backend.device``)."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(
            f"{setting} {name!r} asked for but CUDA is not available; set {setting} to cpu or auto"
        )
    try:
        return torch.device(name)
    except RuntimeError:
        raise UserError(f"{setting} {name!r} is not known; use cpu, cuda, cuda:N or auto") from None


def pick_dtype(
    name: str, device: torch.device | str, setting: str, allowed: tuple[str, ...] = DTYPES
) -> torch.dtype:
    """``auto``: bfloat16 on a CUDA device that supports it, else float32."""
    import torch

    if name == "auto":
        cuda = str(device).startswith("cuda")
        return torch.bfloat16 if cuda and torch.cuda.is_bf16_supported() else torch.float32
    if name not in allowed:
        raise UserError(f"{setting} {name!r} is not known; use one of: auto, {', '.join(allowed)}")
    return getattr(torch, name)
