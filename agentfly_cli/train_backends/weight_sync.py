"""How trained weights reach the rollout backend: one strategy, chosen once at setup.

- :class:`SharedModel`: the hf backend samples from the policy's own model object (torch train
  backend, full weights, one device and dtype): nothing is copied; the backend only drops the
  KV it computed with the old weights.
- :class:`AdapterPush`: LoRA with ``trainer.backend.sync: adapter``: only the adapter tensors
  travel, and the backend keeps its base weights.
- :class:`FullPush`: every other pair (vllm, another device or dtype, DeepSpeed, LoRA merged):
  the (merged) weights are pushed through ``Backend.update_weights``; with
  ``trainer.backend.delta_sync`` and a backend that takes part of the weights
  (``takes_partial_weights``: hf), only the tensors whose checksum changed
  (:mod:`.delta_sync`).

:func:`choose_weight_sync` refuses, with a one-line error, a backend that cannot take what the
strategy pushes (its ``takes_weights`` / ``takes_adapters`` flags).
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentfly_cli.errors import UserError


class WeightSyncTimeout(UserError):
    """A push of the trained weights did not finish within ``trainer.timeouts.weight_sync_s``."""


class WeightSync:
    """Push the train backend's weights to the rollout backend after an update."""

    name = "sync"

    def __init__(self, train: Any, backend: Any) -> None:
        self.train, self.backend = train, backend

    async def publish(self, version: int, timeout_s: float | None = None) -> None:
        """:meth:`push` the weights after ``version`` updates. The push waits for the requests
        in flight to finish on the old weights, and requests start on the new ones after it,
        so the backend's ``policy_version`` moves as the push stops admissions: every request
        that starts from then on is sampled by ``version`` (the hf backend stamps it at
        admission, vllm at submission). Past
        ``timeout_s`` the push is cancelled and one :class:`WeightSyncTimeout` names the
        backend that hung."""
        from agentfly_cli.backends.base import BackendUnavailableError
        from agentfly_cli.runtime.deadlines import within

        what = f"weight sync ({self.name} push of version {version})"
        previous = self.backend.policy_version

        async def move_then_push() -> None:
            # one stretch with no await: the version moves as the push stops admissions (the
            # hf backend's pause; vllm's barrier command), so no request can be admitted on
            # the old weights with the new version
            self.backend.policy_version = version
            await self.push()

        try:
            await within(move_then_push(), timeout_s)
        except BaseException as exc:
            self.backend.policy_version = previous  # the old weights are still there
            if isinstance(exc, BackendUnavailableError):
                raise BackendUnavailableError(f"{what} failed: {exc}") from exc
            if isinstance(exc, asyncio.TimeoutError):
                backend = getattr(self.backend, "name", "rollout")
                raise WeightSyncTimeout(
                    f"{what} to the {backend} backend did not finish within {timeout_s:g} s: "
                    "the backend hung or its requests in flight never ended; check the "
                    "backend (or raise trainer.timeouts.weight_sync_s)"
                ) from None
            raise

    async def push(self) -> None:
        raise NotImplementedError

    def metrics(self) -> dict[str, float]:
        """The last push's ``sync/*`` metrics (bytes, tensors, seconds), where it counts them."""
        return {}

    async def release_memory(self) -> None:
        """Free what the rollouts keep that the update would make stale (only when rollouts
        and training share one model, their KV would sit beside the activations)."""


class SharedModel(WeightSync):
    name = "shared"

    async def push(self) -> None:
        await self.backend.update_weights({})  # same tensors: only the stale KV goes

    async def release_memory(self) -> None:
        await self.backend.update_weights({})


class AdapterPush(WeightSync):
    name = "adapter"

    async def push(self) -> None:
        config = self.train.unwrapped().peft_config["default"]
        await self.backend.update_adapter(dict(self.train.sync_weights()), config)


class FullPush(WeightSync):
    name = "full"

    def __init__(self, train: Any, backend: Any, *, delta: bool = False) -> None:
        from agentfly_cli.train_backends.delta_sync import PushMeter

        super().__init__(train, backend)
        self.meter = PushMeter(delta and getattr(backend, "takes_partial_weights", False))

    async def push(self) -> None:
        try:
            await self.backend.update_weights(self.meter.filter(self.train.sync_weights()))
        except BaseException:
            self.meter.discard()
            raise
        self.meter.commit()

    def metrics(self) -> dict[str, float]:
        return dict(self.meter.last)


def can_share_model(backend_config: Any, train: Any, train_settings: Any) -> bool:
    """One model for rollouts and training: a train backend whose model object can be
    shared (``shares_model``: torch), hf rollouts, full weights, the same device and dtype."""
    return (
        backend_config.name == "hf"
        and getattr(train, "shares_model", False)
        and train_settings.lora is None
        and backend_config.device in ("auto", str(train.device))
        and backend_config.dtype in ("auto", train_settings.dtype)
    )


def build_rollout_backend(
    resolved: Any, train: Any, train_settings: Any, *, overlapping: bool
) -> tuple[Any, bool]:
    """The rollout backend, and whether it samples from the policy's own model object (hf,
    when :func:`can_share_model`); never when rollouts run beside the update
    (``overlapping``: async with lookahead), which would change the weights under them."""
    if not overlapping and can_share_model(resolved.backend_config, train, train_settings):
        from agentfly_cli.backends.hf import HFBackend

        model = train.unwrapped()
        return HFBackend(resolved.backend_config, resolved.chat.tokenizer, model=model), True
    return resolved.build_backend(), False


def choose_weight_sync(train: Any, backend: Any, train_settings: Any, *, shared: bool):
    """The strategy for this pair; a one-line error when the backend cannot take its pushes."""
    if shared:
        return SharedModel(train, backend)
    if train_settings.lora is not None and train_settings.sync == "adapter":
        if not backend.takes_adapters:
            raise UserError(
                "trainer.backend.sync: adapter needs a rollout backend that takes LoRA adapters "
                f"(hf); the {backend.name} backend does not: use sync: merge"
            )
        return AdapterPush(train, backend)
    if not backend.takes_weights:
        raise UserError(
            f"the {backend.name} rollout backend cannot take new weights, so rollouts would "
            "never follow the trained policy; train with backend hf or vllm"
        )
    return FullPush(train, backend, delta=train_settings.delta_sync)
