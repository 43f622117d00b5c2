"""``@reward``: score a finished trajectory.

A reward is called with the final answer (its first parameter, or the one named
``prediction``), the trajectory (the parameter named ``trajectory``, if any), and the dataset
row's fields, injected by parameter name; ``**kwargs`` receives the remaining fields. It returns
a number, or a dict with ``reward`` plus extras. It runs under a timeout (sync rewards in a
worker thread). A failure is recorded on the :class:`RewardResult`; whether it then scores
zero or aborts is the reward's ``on_error`` policy.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import inspect
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from agentfly_cli import settings
from agentfly_cli.components.execution import call_with_timeout, is_async_callable
from agentfly_cli.errors import RewardError, UserError

__all__ = ["CombinedReward", "Reward", "RewardDefinitionError", "RewardResult", "reward"]

REWARD_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
PREDICTION = "prediction"
TRAJECTORY = "trajectory"
OnError = Literal["zero", "raise"]


class RewardDefinitionError(TypeError):
    """A function that cannot be turned into a reward (raised at decoration time)."""


class MissingFieldError(LookupError):
    """The dataset row lacks a field that the reward requires."""


@dataclass
class RewardResult:
    """A score. ``failed`` results carry their ``error`` and score ``reward`` (0.0)."""

    reward: float
    extras: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    failed: bool = False
    error: str | None = None
    latency_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _checked_reward_name(name: str) -> str:
    if not REWARD_NAME.match(name):
        raise RewardDefinitionError(
            f"reward name {name!r} is not valid; pass name=... with 1-64 letters, digits, "
            "'_', '-' or '.'"
        )
    return name


class Reward:
    """A scoring function. Create one with :func:`reward`."""

    def __init__(
        self,
        func: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout: float | None | Literal["default"] = "default",
        on_error: OnError = "zero",
    ) -> None:
        if not callable(func):
            raise RewardDefinitionError(f"@reward needs a function, got {type(func).__name__}")
        if on_error not in ("zero", "raise"):
            raise RewardDefinitionError(f"on_error must be 'zero' or 'raise', got {on_error!r}")
        self.func = func
        self.name = _checked_reward_name(
            name if name is not None else getattr(func, "__name__", "")
        )
        doc = inspect.getdoc(func) or ""
        self.description = description or (doc.strip().splitlines() or [""])[0]
        self.timeout = settings.reward_timeout() if timeout == "default" else timeout
        if self.timeout is not None and self.timeout <= 0:
            raise RewardDefinitionError(f"reward '{self.name}': timeout must be > 0 or None")
        self.on_error: OnError = on_error
        self._is_async = is_async_callable(func)
        parameters = inspect.signature(func).parameters
        self._takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
        named = [
            p
            for p in parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY, p.POSITIONAL_ONLY)
        ]
        if any(p.kind is p.POSITIONAL_ONLY for p in named):
            raise RewardDefinitionError(
                f"reward '{self.name}': positional-only parameters cannot be injected by name"
            )
        names = [p.name for p in named]
        if PREDICTION in names:
            self._prediction_parameter: str | None = PREDICTION
        elif named and named[0].name != TRAJECTORY and named[0].kind is not named[0].KEYWORD_ONLY:
            self._prediction_parameter = named[0].name
        else:
            self._prediction_parameter = None
        self._wants_trajectory = TRAJECTORY in names
        reserved = {self._prediction_parameter, TRAJECTORY}
        self._field_parameters = {p.name: p for p in named if p.name not in reserved}
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def with_name(self, name: str) -> Reward:
        """A copy of this reward under another (validated) name."""
        renamed = copy.copy(self)
        renamed.name = _checked_reward_name(name)
        return renamed

    def with_options(self, options: Mapping[str, Any]) -> Reward:
        """This reward with the options a run's settings give it (``reward: [{name, options}]``).

        A plain reward takes no options; configurable ones (``llm_judge``) override this and
        return a configured copy. Bad options are a one-line :class:`UserError`.
        """
        if options:
            raise UserError(
                f"reward '{self.name}' takes no options (got: {', '.join(map(str, options))}); "
                "remove them"
            )
        return self

    @property
    def fields(self) -> list[str]:
        """The dataset fields this reward requires (parameters without defaults)."""
        return [n for n, p in self._field_parameters.items() if p.default is p.empty]

    def __repr__(self) -> str:
        return f"<Reward {self.name}>"

    def _bind(self, prediction: Any, trajectory: Any, fields: Mapping[str, Any]) -> dict:
        arguments: dict[str, Any] = {}
        if self._prediction_parameter is not None:
            arguments[self._prediction_parameter] = prediction
        if self._wants_trajectory:
            arguments[TRAJECTORY] = trajectory
        missing = []
        for name, parameter in self._field_parameters.items():
            if name in fields:
                arguments[name] = fields[name]
            elif parameter.default is parameter.empty:
                missing.append(name)
        if missing:
            available = ", ".join(sorted(map(str, fields))) or "none"
            raise MissingFieldError(
                f"reward '{self.name}' needs dataset field(s) {', '.join(map(repr, missing))}; "
                f"the row has: {available}"
            )
        if self._takes_kwargs:
            for name, value in fields.items():
                arguments.setdefault(name, value)
        return arguments

    async def __call__(
        self, prediction: Any = None, trajectory: Any = None, **fields: Any
    ) -> RewardResult:
        """Score ``prediction``; dataset fields come as keyword arguments."""
        return await self.score(prediction, trajectory, fields)

    def score_sync(self, prediction: Any = None, trajectory: Any = None, **fields: Any):
        """Blocking convenience for scripts (not for use inside an event loop)."""
        return asyncio.run(self.score(prediction, trajectory, fields))

    async def score(
        self,
        prediction: Any,
        trajectory: Any = None,
        fields: Mapping[str, Any] | None = None,
        *,
        timeout: float | None | Literal["default"] = "default",
    ) -> RewardResult:
        """Score one finished trajectory. ``fields`` is the dataset row."""
        started = time.perf_counter()
        limit = self.timeout if timeout == "default" else timeout
        try:
            arguments = self._bind(prediction, trajectory, fields or {})
            value = await call_with_timeout(self.func, arguments, limit, is_async=self._is_async)
            result = self._coerce(value)
        except asyncio.CancelledError:
            raise
        except asyncio.TimeoutError as exc:
            result = self._failure(f"reward '{self.name}' timed out after {limit:g} s", exc)
        except MissingFieldError as exc:
            result = self._failure(str(exc), exc)
        except Exception as exc:
            message = str(exc).strip() or "(no message)"
            result = self._failure(
                f"reward '{self.name}' failed: {type(exc).__name__}: {message}", exc
            )
        result.latency_s = round(time.perf_counter() - started, 6)
        return result

    def _coerce(self, value: Any) -> RewardResult:
        extras: dict[str, Any] = {}
        if isinstance(value, RewardResult):
            if not math.isfinite(value.reward):
                raise ValueError(f"returned a non-finite reward ({value.reward})")
            return dataclasses.replace(value, name=value.name or self.name)
        if isinstance(value, Mapping):
            if "reward" not in value:
                keys = ", ".join(map(str, value)) or "none"
                raise ValueError(f"returned a dict without a 'reward' key (keys: {keys})")
            extras = {k: v for k, v in value.items() if k != "reward"}
            value = value["reward"]
        if isinstance(value, str) or not hasattr(value, "__float__"):
            raise TypeError(
                f"must return a number or a dict with 'reward', got {type(value).__name__}"
            )
        number = float(value)
        if not math.isfinite(number):
            raise ValueError(f"returned a non-finite reward ({number})")
        return RewardResult(number, extras, self.name)

    def _failure(self, message: str, exc: BaseException) -> RewardResult:
        if self.on_error == "raise":
            raise RewardError(message) from exc
        return RewardResult(0.0, {}, self.name, failed=True, error=message)


class CombinedReward:
    """A weighted sum of rewards, scored concurrently. Extras hold each component's score."""

    def __init__(self, components: Sequence[tuple[Reward, float]]) -> None:
        if not components:
            raise RewardDefinitionError("CombinedReward needs at least one (reward, weight)")
        names = [r.name for r, _ in components]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise RewardDefinitionError(f"reward(s) listed twice: {', '.join(duplicates)}")
        self.components = [(r, float(w)) for r, w in components]
        self.name = " + ".join(
            r.name if w == 1.0 else f"{w:g}*{r.name}" for r, w in self.components
        )

    @property
    def fields(self) -> list[str]:
        return sorted({f for r, _ in self.components for f in r.fields})

    async def score(
        self, prediction: Any, trajectory: Any = None, fields: Mapping[str, Any] | None = None
    ) -> RewardResult:
        started = time.perf_counter()
        results = await asyncio.gather(
            *(r.score(prediction, trajectory, fields) for r, _ in self.components)
        )
        total = 0.0
        extras: dict[str, Any] = {}
        errors = []
        for (component, weight), result in zip(self.components, results, strict=True):
            total += weight * result.reward
            extras[component.name] = result.reward
            for key, value in result.extras.items():
                extras[f"{component.name}/{key}"] = value
            if result.failed:
                errors.append(result.error)
        return RewardResult(
            total,
            extras,
            self.name,
            failed=bool(errors),
            error="; ".join(errors) if errors else None,
            latency_s=round(time.perf_counter() - started, 6),
        )

    async def __call__(self, prediction: Any = None, trajectory: Any = None, **fields: Any):
        return await self.score(prediction, trajectory, fields)


def reward(func=None, /, **options):
    """Make a reward from a function: bare ``@reward`` or ``@reward(name=..., ...)``.

    Options: ``name``, ``description``, ``timeout`` in seconds, and ``on_error``: ``"zero"``
    (a failure scores 0 and is recorded) or ``"raise"`` (a failure raises :class:`RewardError`).
    """
    if func is not None:
        return Reward(func, **options)

    def decorate(inner: Callable[..., Any]) -> Reward:
        return Reward(inner, **options)

    return decorate
