"""The ``deepspeed`` train backend: ZeRO stages 0-3 over data-parallel ranks.

Start one process per device with the ``deepspeed`` launcher or ``torchrun`` (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR/PORT from the environment; a lone process without them is rank 0 of 1).
CUDA ranks talk over NCCL, CPU ranks over gloo.

Gradient accumulation is the caller's: the engine runs with
``managed_gradient_accumulation: false``, so ``backward`` only accumulates (ZeRO-2/3 reduce
into their partitions as they go) and ``step`` is the boundary that reduces, clips and
updates. DeepSpeed averages gradients over the ranks.
"""

from __future__ import annotations

import math
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.train_backends.base import (
    TrainBackend,
    TrainBackendSettings,
    iter_weights,
    load_hf_model,
    make_scheduler,
    prepare_model,
    resolve_dtype,
    strip_prefix,
    trainable_parameters,
    write_hf_folder,
)
from agentfly_cli.train_backends.torch_backend import grad_norm, make_adamw

INSTALL_HINT = "pip install 'deepspeed>=0.19.8' (or `make install-deepspeed`)"
CHECKPOINT_TAG = "deepspeed"


def import_deepspeed():
    """The ``deepspeed`` module, or a one-line UserError naming the install."""
    try:
        import deepspeed
    except ImportError:
        message = f"the deepspeed train backend needs DeepSpeed: run `{INSTALL_HINT}`"
        raise UserError(message) from None
    return deepspeed


def check_unmanaged_accumulation(deepspeed) -> None:
    """Older DeepSpeed ignores ``managed_gradient_accumulation`` silently: refuse it."""
    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    needed = (
        hasattr(DeepSpeedEngine, "managed_gradient_accumulation")
        and hasattr(DeepSpeedZeroOptimizer, "finalize_gradient_accumulation_boundary")
        and hasattr(DeepSpeedZeroOptimizer_Stage3, "finalize_gradient_accumulation_boundary")
    )
    if not needed:
        raise UserError(
            f"DeepSpeed {deepspeed.__version__} lacks unmanaged gradient accumulation; "
            "run `pip install -U 'deepspeed>=0.19.8'`"
        )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def default_dist_env() -> None:
    """A lone process (no launcher) becomes rank 0 of a world of 1."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))


def ds_config(config: TrainBackendSettings, *, bf16: bool, cuda: bool) -> dict:
    """The DeepSpeed config dict for ``config`` (client optimizer, caller-owned boundaries)."""
    zero: dict[str, Any] = {"stage": config.zero_stage}
    if not cuda:
        zero["overlap_comm"] = False
    if config.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": cuda}
    if config.zero_stage == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    clip = config.max_grad_norm or 0.0
    if config.zero_stage == 0 and not bf16:
        clip = 0.0  # plain fp32 data parallel: the backend clips itself (see _clip_hook)
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "gradient_clipping": clip,
        "zero_optimization": zero,
        "bf16": {"enabled": bf16},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


class DeepSpeedBackend(TrainBackend):
    """A transformers model (optionally with LoRA) inside a DeepSpeed engine."""

    name = "deepspeed"

    def __init__(self, model_path: str | Path, config: TrainBackendSettings):
        """Join the process group, load the model, and build the engine."""
        import torch

        deepspeed = import_deepspeed()
        check_unmanaged_accumulation(deepspeed)
        self._ds = deepspeed
        self.config = config
        self.model_path = str(model_path)
        default_dist_env()
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        cuda = config.device != "cpu" and torch.cuda.is_available()
        if config.device.startswith("cuda") and not cuda:
            raise UserError(
                f"deepspeed backend: device {config.device!r} asked for but CUDA is not "
                "available; set trainer.backend.device to cpu or auto"
            )
        if cuda:
            self.device = torch.device("cuda", local_rank)
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        deepspeed.init_distributed(dist_backend="nccl" if cuda else "gloo")
        self.rank = torch.distributed.get_rank()
        self.world_size = torch.distributed.get_world_size()
        self.is_main = self.rank == 0
        self.dtype = resolve_dtype(config.dtype, self.device)
        bf16 = self.dtype == torch.bfloat16
        self.lora = config.lora is not None
        self.zero3 = config.zero_stage == 3
        model = prepare_model(load_hf_model(model_path, self.dtype), config)
        params = trainable_parameters(model)
        if not params:
            raise UserError("train backend: the model has no trainable parameters")
        optimizer = self._make_optimizer(params)
        self.scheduler = make_scheduler(optimizer, config)
        self._own_clip = config.zero_stage == 0 and not bf16
        self._norm: float | None = None
        if self._own_clip:
            optimizer.register_step_pre_hook(self._clip_hook)
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=model, optimizer=optimizer, config=ds_config(config, bf16=bf16, cuda=cuda)
        )
        self.model = self.engine

    def _make_optimizer(self, params: list):
        if not self.config.offload_optimizer:
            return make_adamw(params, self.config)
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        c = self.config
        return DeepSpeedCPUAdam(
            params, lr=c.lr, betas=tuple(c.betas), eps=c.eps, weight_decay=c.weight_decay
        )

    def _clip_hook(self, optimizer, args, kwargs) -> None:
        """ZeRO-0 in fp32: measure and clip the reduced gradients; drop them when not finite."""
        params = [p for group in optimizer.param_groups for p in group["params"]]
        self._norm = grad_norm(params, self.config.max_grad_norm)
        if not math.isfinite(self._norm):
            for param in params:
                param.grad = None  # AdamW skips parameters without a gradient

    def _gather(self):
        """A context factory that makes ZeRO-3 parameters whole (None below stage 3)."""
        if not self.zero3:
            return None
        gathered = self._ds.zero.GatheredParameters
        return lambda params: gathered(params, modifier_rank=None)

    # ---- training -------------------------------------------------------------------------

    def unwrapped(self) -> Any:
        """The HF model, or the PEFT model under LoRA (``engine.module``)."""
        return self.engine.module

    def backward(self, loss) -> None:
        """``engine.backward``: accumulate this micro-batch's gradients."""
        self.engine.backward(loss)

    def step(self) -> float:
        """Reduce, clip and apply the accumulated gradients; the global norm before clipping."""
        self._norm = None
        self.engine.step()
        norm = self._norm if self._own_clip else self.engine.get_global_grad_norm()
        norm = float("nan") if norm is None else float(norm)
        applied = getattr(self.engine, "_step_applied", True) and math.isfinite(norm)
        if applied:
            self.scheduler.step()
        elif math.isfinite(norm):
            norm = float("inf")  # DeepSpeed skipped the step
        return norm

    def current_lr(self) -> float:
        """The learning rate the next ``step()`` applies."""
        return float(self.scheduler.get_last_lr()[0])

    # ---- weights --------------------------------------------------------------------------

    def _collect(self, pairs: Iterator[tuple[str, Any]]) -> list[tuple[str, Any]]:
        """Run ``pairs`` on every rank (ZeRO-3 gathers are collective); whole CPU copies on
        every rank, since each rank feeds its own rollout backend."""
        if not self.zero3:
            return list(pairs)
        return [(name, t.detach().to("cpu", copy=True)) for name, t in pairs]

    def sync_weights(self) -> Iterator[tuple[str, Any]]:
        """Weights in the base model's names (merged under LoRA, or the adapters only).

        Under ZeRO-3 every rank must call it (the gathers are collective) and gets whole CPU
        copies. Below stage 3 the tensors are live.
        """
        from agentfly_cli.train_backends.lora import adapter_state, lora_parameters

        module = self.engine.module
        gather = self._gather()
        if not self.lora:
            return iter(self._collect(iter_weights(module, gather=gather)))
        if self.config.sync == "adapter":
            tensors = dict(self._collect(self._lora_tensors(lora_parameters(module), gather)))
            return iter(adapter_state(module, tensors).items())
        merged = iter_weights(module, gather=gather, merge_lora=True)
        return iter([(strip_prefix(name), t) for name, t in self._collect(merged)])

    @staticmethod
    def _lora_tensors(named: list, gather) -> Iterator[tuple[str, Any]]:
        for name, param in named:
            if gather is None:
                yield name, param.detach()
            else:
                with gather([param]):
                    yield name, param.detach()

    def model_state(self) -> dict[str, Any]:
        """The model's full state (PEFT names under LoRA); whole on every rank under ZeRO-3."""
        return dict(self._collect(iter_weights(self.engine.module, gather=self._gather())))

    def load_model_state(self, state: dict[str, Any]) -> None:
        """Copy ``state`` into the model on every rank, then refresh the fp32 master copies."""
        import torch

        module = self.engine.module
        expected = {name for name, _ in iter_weights(module)}
        missing = sorted(expected - set(state))
        if missing:
            raise UserError(f"model state lacks {len(missing)} weight(s), e.g. {missing[0]!r}")
        targets = dict(module.named_parameters(remove_duplicate=False))
        targets.update(module.named_buffers())
        with torch.no_grad():
            for name, target in targets.items():
                if name not in state:
                    continue
                if self.zero3 and hasattr(target, "ds_id"):
                    with self._ds.zero.GatheredParameters([target], modifier_rank=0):
                        if self.is_main:
                            target.copy_(state[name].to(target.device, target.dtype))
                else:
                    target.copy_(state[name].to(target.device, target.dtype))
        refresh = getattr(self.optimizer, "refresh_fp32_params", None)
        if refresh is not None:
            refresh()

    def state_dict(self) -> dict:
        """Not available: ZeRO partitions the optimizer over ranks; use save_checkpoint."""
        raise NotImplementedError("the deepspeed backend checkpoints with save_checkpoint(folder)")

    def load_state_dict(self, state: dict) -> None:
        """Not available: use load_checkpoint."""
        raise NotImplementedError("the deepspeed backend resumes with load_checkpoint(folder)")

    def save_checkpoint(
        self, folder: str | Path, *, model_folder: str | Path | None = None
    ) -> None:
        """``engine.save_checkpoint`` into ``folder/deepspeed`` (every rank must call it);
        ``model_folder`` is not used (ZeRO's partitions hold the weights).

        The ranks write a temp tag first; rank 0 renames it once all are done.
        """
        folder = Path(folder)
        temp_tag = f".{CHECKPOINT_TAG}-tmp"
        if self.is_main:
            folder.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(folder / temp_tag, ignore_errors=True)
        self.barrier()
        client = {"scheduler": self.scheduler.state_dict()}
        self.engine.save_checkpoint(
            str(folder), tag=temp_tag, client_state=client, save_latest=False
        )
        self.barrier()
        if self.is_main:
            final = folder / CHECKPOINT_TAG
            shutil.rmtree(final, ignore_errors=True)
            os.replace(folder / temp_tag, final)
        self.barrier()

    def load_checkpoint(self, folder: str | Path) -> None:
        """Resume weights, optimizer and LR schedule from ``save_checkpoint``'s folder."""
        folder = Path(folder)
        if not (folder / CHECKPOINT_TAG).is_dir():
            raise UserError(f"no deepspeed checkpoint at {str(folder / CHECKPOINT_TAG)!r}")
        path, client = self.engine.load_checkpoint(
            str(folder), tag=CHECKPOINT_TAG, load_lr_scheduler_states=False
        )
        if path is None:
            raise UserError(f"deepspeed could not load the checkpoint in {str(folder)!r}")
        self.scheduler.load_state_dict(client["scheduler"])

    def save_model(self, folder: str | Path) -> None:
        """A Hugging Face model folder, written by rank 0 (every rank must call it)."""
        module = self.engine.module
        pairs = iter_weights(module, gather=self._gather(), merge_lora=self.lora)
        weights = {strip_prefix(name): t for name, t in self._collect(pairs)}
        if self.is_main:
            write_hf_folder(folder, weights, module)
        self.barrier()

    def save_adapter(self, folder: str | Path) -> None:
        """The LoRA adapter as a PEFT folder, written by rank 0 (every rank must call it)."""
        from agentfly_cli.train_backends.lora import lora_parameters, save_adapter_folder

        if not self.lora:
            super().save_adapter(folder)
        module = self.engine.module
        tensors = dict(self._collect(self._lora_tensors(lora_parameters(module), self._gather())))
        if self.is_main:
            save_adapter_folder(module, folder, tensors)
        self.barrier()

    def barrier(self) -> None:
        """Wait for every rank."""
        import torch

        if torch.distributed.is_initialized():
            torch.distributed.barrier()

    def close(self) -> None:
        """Release the engine (the process group stays up for the caller)."""
        engine = getattr(self, "engine", None)
        if engine is not None and hasattr(engine, "destroy"):
            engine.destroy()
        self.engine = self.model = self.optimizer = self.scheduler = None
