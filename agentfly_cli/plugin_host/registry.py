"""Named components (tools, rewards, envs, recipes, backends, algorithms, parsers) and their
plugins."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentfly_cli.errors import ComponentConflictError, UnknownComponentError

KINDS = (
    "tools",
    "rewards",
    "envs",
    "recipes",
    "backends",
    "train_backends",
    "advantages",
    "policy_losses",
    "parsers",
)
# the kinds that have an `agentfly KIND list` command (tests check that each one exists)
LISTED_KINDS = ("tools", "rewards", "envs", "recipes", "backends", "parsers")
SINGULAR = {
    "advantages": "advantage",
    "policy_losses": "policy_loss",
    "train_backends": "train backend",
}


@dataclass(frozen=True)
class Provenance:
    """Where a component came from."""

    plugin: str
    distribution: str | None = None
    version: str | None = None
    builtin: bool = False

    def describe(self) -> str:
        if self.distribution:
            return f"plugin '{self.plugin}' ({self.distribution} {self.version or ''})".replace(
                " )", ")"
            )
        return f"plugin '{self.plugin}'"


@dataclass
class Entry:
    """One registered component."""

    kind: str
    name: str
    obj: Any
    provenance: Provenance
    description: str = ""


@dataclass(frozen=True)
class RecipeFamily:
    """Recipes made on demand: ``NAME:PARAM`` (``reasoning_gym:chain_sum``), or ``NAME`` alone
    where ``param`` is None.

    ``build(param, options)`` returns the recipe's settings (a dict, as a YAML recipe holds them)
    after writing its tasks where ``data.path`` says (see
    :mod:`agentfly_cli.recipes.families`); ``options`` are what ``--set NAME.KEY=VALUE`` gave.
    A bad param or option, or a library that is not installed, is one ``UserError`` line."""

    build: Callable[[str | None, Mapping[str, Any]], dict[str, Any]]
    #: how listings name the parameter (``reasoning_gym:NAME``); None: the family takes none
    param: str | None = "PARAM"
    #: each option ``--set NAME.KEY=VALUE`` accepts, with one line on what it does
    options: Mapping[str, str] = field(default_factory=dict)
    #: a parameter that works (``chain_sum``): error lines and tests use it
    example: str | None = None

    def spelled(self, name: str) -> str:
        """How a listing names the family's recipes: ``name:PARAM``, or ``name``."""
        return f"{name}:{self.param}" if self.param else name


@dataclass(frozen=True)
class RecipeRef:
    """A recipe: a YAML file that a plugin provides, or a :class:`RecipeFamily` (then
    ``path`` is None)."""

    name: str
    path: str | None
    description: str = ""
    family: RecipeFamily | None = None


@dataclass(frozen=True)
class BackendRef:
    """A backend: a factory that builds it from its config. An LLM backend:
    ``factory(BackendSettings, chat)``; a train backend: ``factory(model_path, config)``."""

    name: str
    factory: Any
    description: str = ""


@dataclass(frozen=True)
class RegisteredEstimator:
    """A registered advantage estimator, with what the trainer must know about it (declared
    at registration: ``register("advantage", name, fn, group_relative=..., needs_values=...,
    needs_greedy=...)``).
    Calling it calls ``fn``."""

    fn: Callable[..., Any]
    #: compares the chains of one task: needs rollout.n >= 2, and equal rewards teach nothing
    group_relative: bool = False
    #: needs per-token value estimates: the trainer trains a value head beside the policy
    needs_values: bool = False
    #: needs each task's greedy-rollout reward (``AdvantageInput.baselines``): the trainer
    #: rolls one extra chain per task out at temperature 0, and does not train on it
    needs_greedy: bool = False

    def __call__(self, data: Any, config: Any) -> Any:
        """``fn(data: AdvantageInput, config: AlgorithmSettings) -> AdvantageOutput``."""
        return self.fn(data, config)


@dataclass
class Registry:
    """The components of one kind. A name given twice is a conflict, never an overwrite."""

    kind: str
    _entries: dict[str, Entry] = field(default_factory=dict)
    _conflicts: dict[str, list[Entry]] = field(default_factory=dict)

    @property
    def singular(self) -> str:
        return SINGULAR.get(self.kind, self.kind.rstrip("s"))

    def add(self, entry: Entry) -> None:
        """Add ``entry``; raise :class:`ComponentConflictError` if its name is taken."""
        existing = self._entries.get(entry.name)
        if existing is not None:
            self._conflicts.setdefault(entry.name, [existing]).append(entry)
            raise ComponentConflictError(
                conflict_message(self.singular, entry.name, existing, entry)
            )
        self._entries[entry.name] = entry

    def entry(self, name: str) -> Entry:
        """The entry called ``name``; a clear error when it is unknown or in conflict."""
        if name in self._conflicts:
            first, *others = self._conflicts[name]
            raise ComponentConflictError(conflict_message(self.singular, name, first, others[0]))
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownComponentError(self._unknown_message(name)) from None

    def get(self, name: str) -> Any:
        return self.entry(name).obj

    def _unknown_message(self, name: str) -> str:
        known = sorted(self._entries)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        if self.kind in LISTED_KINDS:
            listing = f"run `agentfly {self.kind} list` to see the {len(known)} available"
        else:
            listing = f"available: {', '.join(known) or 'none'}"
        return f"unknown {self.singular} '{name}'; {hint}{listing}"

    def entries(self) -> list[Entry]:
        return [self._entries[name] for name in sorted(self._entries)]

    def conflicts(self) -> dict[str, list[Entry]]:
        return {name: list(entries) for name, entries in self._conflicts.items()}

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def __len__(self) -> int:
        return len(self._entries)


def conflict_message(singular: str, name: str, first: Entry, second: Entry) -> str:
    if first.provenance == second.provenance:
        return (
            f"{singular} '{name}' is registered twice by {first.provenance.describe()}; "
            "register each name once"
        )
    return (
        f"{singular} '{name}' is registered by both {first.provenance.describe()} and "
        f"{second.provenance.describe()}; rename one of them or uninstall one plugin"
    )


@dataclass
class Components:
    """Every registry, by kind."""

    tools: Registry = field(default_factory=lambda: Registry("tools"))
    rewards: Registry = field(default_factory=lambda: Registry("rewards"))
    envs: Registry = field(default_factory=lambda: Registry("envs"))
    recipes: Registry = field(default_factory=lambda: Registry("recipes"))
    backends: Registry = field(default_factory=lambda: Registry("backends"))
    train_backends: Registry = field(default_factory=lambda: Registry("train_backends"))
    advantages: Registry = field(default_factory=lambda: Registry("advantages"))
    policy_losses: Registry = field(default_factory=lambda: Registry("policy_losses"))
    parsers: Registry = field(default_factory=lambda: Registry("parsers"))

    def of(self, kind: str) -> Registry:
        if kind not in KINDS:
            raise ValueError(f"unknown component kind {kind!r}; kinds: {', '.join(KINDS)}")
        return getattr(self, kind)
