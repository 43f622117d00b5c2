"""Progress inside a training step, for the live display.

A step is a few phases: ``rollout`` (chains finished of the step's chains), ``logprobs`` (the
old-policy and reference passes, where the algorithm needs them), ``train`` (micro-batches of
the update done) and ``eval`` (held-out chains). :class:`StepProgress` holds the phase that
runs now: units done of the total, tokens so far and seconds since the phase began, and
renders it as one line, e.g. ``step 3 rollout: 12/32 chains | 1,204 tokens | 14s``.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class StepProgress:
    """The phase of the running step; :meth:`line` is what the live display shows."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.step: int | None = None
        self.phase: str | None = None  # None between phases
        self.unit = ""
        self.done = 0
        self.total = 0
        self.tokens = 0
        self._live_tokens: Callable[[], int] | None = None
        self._started = 0.0
        #: more lines under the step's, each from a callable ("" hides it): async training's
        #: producer shows what it rolls out beside the trainer's phase
        self.companions: list[Callable[[], str]] = []

    def begin(
        self,
        phase: str,
        *,
        step: int | None,
        total: int,
        unit: str,
        live_tokens: Callable[[], int] | None = None,
    ) -> None:
        """Start ``phase`` of ``step`` with ``total`` units to do. ``live_tokens``, when
        given, counts the phase's tokens itself (e.g. tokens sampled so far)."""
        self.step, self.phase, self.unit = step, phase, unit
        self.done, self.total, self.tokens = 0, int(total), 0
        self._live_tokens = live_tokens
        self._started = self._clock()

    def advance(self, count: int = 1, *, tokens: int = 0) -> None:
        """``count`` more units done, with ``tokens`` more tokens."""
        self.done += count
        self.tokens += tokens

    def end(self) -> None:
        """The phase is over: the line is empty until the next one begins."""
        self.phase = None
        self._live_tokens = None

    def token_count(self) -> int:
        return self.tokens + (self._live_tokens() if self._live_tokens is not None else 0)

    def elapsed(self) -> float:
        return self._clock() - self._started if self.phase is not None else 0.0

    def line(self) -> str:
        """``step 3 rollout: 12/32 chains | 1,204 tokens | 14s``; empty between phases."""
        if self.phase is None:
            return ""
        where = f"step {self.step} " if self.step is not None else ""
        return (
            f"{where}{self.phase}: {self.done}/{self.total} {self.unit} | "
            f"{self.token_count():,} tokens | {self.elapsed():.0f}s"
        )

    def lines(self) -> list[str]:
        """:meth:`line` and the companions' lines, the empty ones left out."""
        return [text for text in (self.line(), *(c() for c in self.companions)) if text]
