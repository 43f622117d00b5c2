"""The protocol of a source of training steps: the synchronous loop (:mod:`.sync`) and the
asynchronous producer's steps (:mod:`.async_steps`)."""

from __future__ import annotations

from typing import Any, Protocol


class StepSource(Protocol):
    """Rolls out (or takes) each step's trajectories and trains on them with
    ``Trainer.train_on``."""

    async def step(self, step: int) -> dict[str, float]:
        """Run training step ``step``; its metrics."""
        ...

    def stepped(self, step: int) -> None:
        """Step ``step`` is over (logged, evaluated, checkpointed)."""
        ...

    def checkpoint_state(self) -> dict[str, Any]:
        """What a resumed run needs from this source (checkpoint ``extra`` keys)."""
        ...

    async def close(self) -> None:
        """Stop whatever the source runs in the background."""
        ...
