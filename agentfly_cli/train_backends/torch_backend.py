"""The ``torch`` train backend: one process, CPU or one GPU, AdamW.

In bfloat16 the model runs in bf16 while the optimizer keeps float32 master weights: each
``backward`` moves the bf16 gradients into float32 accumulators, and ``step`` updates the
masters and copies them back into the model (what DeepSpeed's bf16 mode does too).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.runtime.malloc import keep_freed_memory
from agentfly_cli.train_backends.base import (
    TrainBackend,
    TrainBackendSettings,
    atomic_torch_save,
    iter_weights,
    load_hf_model,
    load_hf_weights,
    make_scheduler,
    prepare_model,
    resolve_device,
    resolve_dtype,
    strip_prefix,
    tied_names,
    trainable_parameters,
    write_hf_folder,
)

CHECKPOINT_FILE = "train_state.pt"
CHECKPOINT_FORMAT = "agentfly-torch-backend/2"
#: /1 stored the full model state in every checkpoint; /2 leaves out what the model folder holds
READABLE_FORMATS = ("agentfly-torch-backend/1", CHECKPOINT_FORMAT)


def make_adamw(params: list, config: TrainBackendSettings, *, fused: bool = False):
    """``torch.optim.AdamW`` with the configured hyperparameters.

    ``fused`` updates each parameter in one kernel (CPU and CUDA): the default ``foreach``
    path allocates a temporary as large as all the parameters for ``sqrt(v)`` (540 MB for a
    135M model in float32) and on the CPU is many times slower.
    """
    import torch

    return torch.optim.AdamW(
        params,
        lr=config.lr,
        betas=tuple(config.betas),
        eps=config.eps,
        weight_decay=config.weight_decay,
        fused=fused or None,
    )


def grad_norm(params: list, max_norm: float | None) -> float:
    """The global L2 grad norm of ``params``, clipping to ``max_norm`` when it is set."""
    import torch

    grads = [p for p in params if p.grad is not None]
    if not grads:
        return 0.0
    limit = float("inf") if max_norm is None else max_norm  # inf: measure, never scale
    return float(torch.nn.utils.clip_grad_norm_(grads, limit))


class TorchBackend(TrainBackend):
    """A transformers model (optionally with LoRA) trained in this process."""

    name = "torch"
    plain_grad_accumulation = True
    shares_model = True

    def __init__(self, model_path: str | Path, config: TrainBackendSettings):
        """Load ``model_path`` onto the configured device and dtype, build optimizer and LR."""
        import torch

        keep_freed_memory()
        self.config = config
        self.model_path = str(model_path)
        self.device = resolve_device(config.device)
        self.dtype = resolve_dtype(config.dtype, self.device)
        model = load_hf_model(model_path, self.dtype).to(self.device)
        self.model = prepare_model(model, config)
        self.lora = config.lora is not None
        self._params = trainable_parameters(self.model)
        if not self._params:
            raise UserError("train backend: the model has no trainable parameters")
        # float32 master copies for parameters kept in a lower precision
        self._masters = [
            p if p.dtype == torch.float32 else p.detach().float().requires_grad_(True)
            for p in self._params
        ]
        pairs = zip(self._params, self._masters, strict=True)
        self._pairs = [(p, m) for p, m in pairs if m is not p]
        self.optimizer = make_adamw(
            self._masters, config, fused=self.device.type in ("cpu", "cuda")
        )
        self.scheduler = make_scheduler(self.optimizer, config)

    # ---- training -------------------------------------------------------------------------

    def unwrapped(self) -> Any:
        """The HF model, or the PEFT model under LoRA (the same object as ``model``)."""
        return self.model

    def backward(self, loss) -> None:
        """``loss.backward()``; low-precision gradients are added to the float32 masters."""
        loss.backward()
        for param, master in self._pairs:
            if param.grad is None:
                continue
            if master.grad is None:
                master.grad = param.grad.float()
            else:
                master.grad.add_(param.grad)
            param.grad = None

    def step(self) -> float:
        """Clip, AdamW step, LR step, zero grads; the grad norm before clipping."""
        import math

        import torch

        norm = grad_norm(self._masters, self.config.max_grad_norm)
        if math.isfinite(norm):
            self.optimizer.step()
            with torch.no_grad():
                for param, master in self._pairs:
                    param.copy_(master)
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        for param, _ in self._pairs:
            param.grad = None
        return norm

    def current_lr(self) -> float:
        """The learning rate the next ``step()`` applies."""
        return float(self.scheduler.get_last_lr()[0])

    # ---- weights --------------------------------------------------------------------------

    def sync_weights(self) -> Iterator[tuple[str, Any]]:
        """Weights in the base model's names: the live tensors (full fine-tuning), merged
        copies (LoRA, sync=merge) or the adapter tensors in PEFT's saved names (sync=adapter).

        Live tensors change at the next ``step()``: copy what must outlive it.
        """
        from agentfly_cli.train_backends.lora import adapter_state, lora_parameters

        if not self.lora:
            return iter_weights(self.model)
        if self.config.sync == "adapter":
            tensors = {name: p.detach() for name, p in lora_parameters(self.model)}
            return iter(adapter_state(self.model, tensors).items())
        return (
            (strip_prefix(name), tensor)
            for name, tensor in iter_weights(self.model, merge_lora=True)
        )

    def model_state(self) -> dict[str, Any]:
        """``model.state_dict()`` (the PEFT model's, adapters included, under LoRA)."""
        return self.model.state_dict()

    def load_model_state(self, state: dict[str, Any], *, tied: set[str] = frozenset()) -> None:
        """Load weights from ``model_state``; the float32 masters follow them. Names in
        ``tied`` (aliases of another weight, left out of HF folders) may be missing."""
        import torch

        if tied:
            missing, unexpected = self.model.load_state_dict(state, strict=False)
            if set(missing) - set(tied) or unexpected:
                raise UserError(
                    f"the checkpoint's model weights do not fit this model (missing "
                    f"{sorted(set(missing) - set(tied))[:3]}, unexpected {unexpected[:3]})"
                )
        else:
            self.model.load_state_dict(state, strict=True)
        with torch.no_grad():
            for param, master in self._pairs:
                master.copy_(param)

    def state_dict(self) -> dict:
        """Optimizer, LR schedule and (in bf16) the float32 master weights."""
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "masters": [m.detach() for _, m in self._pairs],
        }

    def load_state_dict(self, state: dict) -> None:
        """Load what ``state_dict`` returned (after ``load_model_state``)."""
        import torch

        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        masters = state.get("masters") or []
        if len(masters) != len(self._pairs):
            raise UserError(
                f"train backend checkpoint holds {len(masters)} master weights, the model "
                f"needs {len(self._pairs)}: was it saved with another dtype or LoRA setting?"
            )
        with torch.no_grad():
            for (param, master), saved in zip(self._pairs, masters, strict=True):
                master.copy_(saved)
                param.copy_(master)

    def save_checkpoint(
        self, folder: str | Path, *, model_folder: str | Path | None = None
    ) -> None:
        """``folder/train_state.pt``: optimizer, schedule and the weights needed to resume
        (atomic write).

        Under LoRA that is the adapters only (the frozen base comes from the model path).
        Full fine-tuning with ``model_folder`` (what :meth:`save_model` wrote, exact in the
        model's dtype) stores no weights: they are read back from there, so a checkpoint
        holds the model once. Without it the weights are stored here too.
        """
        folder = Path(folder)
        state: dict[str, Any] = {"format": CHECKPOINT_FORMAT, "train": self.state_dict()}
        if self.lora:
            state["trainable"] = {
                name: p.detach() for name, p in self.model.named_parameters() if p.requires_grad
            }
        elif model_folder is not None:
            state["weights_in"] = os.path.relpath(model_folder, folder)
        else:
            state["model"] = self.model_state()
        atomic_torch_save(state, folder / CHECKPOINT_FILE)

    def load_checkpoint(self, folder: str | Path) -> None:
        """Resume from ``save_checkpoint``'s folder."""
        import torch

        path = Path(folder) / CHECKPOINT_FILE
        if not path.is_file():
            raise UserError(f"no train backend checkpoint at {str(path)!r}")
        state = torch.load(path, map_location=self.device, weights_only=True)
        if state.get("format") not in READABLE_FORMATS:
            raise UserError(f"{str(path)!r} is not a torch train backend checkpoint")
        if "model" in state:
            self.load_model_state(state["model"])
        elif "trainable" in state:
            self._load_trainable(state["trainable"], path)
        else:
            weights = load_hf_weights(Path(folder) / state["weights_in"], self.device)
            self.load_model_state(weights, tied=tied_names(self.model))
        self.load_state_dict(state["train"])

    def _load_trainable(self, tensors: dict[str, Any], path: Path) -> None:
        """Load the trained (adapter) tensors of a LoRA checkpoint into the model."""
        import torch

        params = dict(self.model.named_parameters())
        wanted = {name for name, p in params.items() if p.requires_grad}
        if set(tensors) != wanted:
            raise UserError(
                f"{str(path)!r} holds other trainable tensors than this model has: was it "
                "saved with another LoRA setting?"
            )
        with torch.no_grad():
            for name, tensor in tensors.items():
                params[name].copy_(tensor)
            for param, master in self._pairs:
                master.copy_(param)

    def save_model(self, folder: str | Path) -> None:
        """A Hugging Face model folder; under LoRA the merged full model."""
        if self.lora:
            weights = {
                strip_prefix(name): t for name, t in iter_weights(self.model, merge_lora=True)
            }
        else:
            weights = dict(iter_weights(self.model))
        write_hf_folder(folder, weights, self.model)

    def save_adapter(self, folder: str | Path) -> None:
        """The LoRA adapter as a PEFT folder (``PeftModel.from_pretrained`` reads it)."""
        if not self.lora:
            super().save_adapter(folder)
        self.model.save_pretrained(str(folder), save_embedding_layers=False)

    def close(self) -> None:
        """Drop the model and optimizer; free cached GPU memory."""
        import torch

        self.model = None
        self.optimizer = None
        self.scheduler = None
        self._params = self._masters = self._pairs = []
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
