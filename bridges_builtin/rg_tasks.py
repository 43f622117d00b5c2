"""reasoning-gym's generators as task rows: which generators a recipe names, their curriculum
levels, and the rows, seeded and deterministic.

A recipe is ``reasoning_gym:NAME`` or a weighted mix ``NAME[=WEIGHT]+NAME[=WEIGHT]...``
(``chain_sum=3+basic_arithmetic``: three quarters chain_sum). Each generator with a curriculum
gives its first ``levels`` curriculum levels (``level`` 0, 1, ...: the library's global levels,
each level's ranges including the easier ones, as its curricula do by default); one without a
curriculum, or ``levels: 0``, gives its default configuration as level 0. A row keeps what
rebuilds its entry exactly (``rg``: generator, level, seed, size, index, config), so the reward
scores the very entry the library generated, whatever JSON did to its metadata.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from agentfly_cli.errors import UserError
from bridges_builtin.library import require
from bridges_builtin.reasoning_gym import OPTIONS

EXTRA = "reasoning-gym"
SKIPPED = ("composite",)  # the library's own mix: a recipe mixes with NAME+NAME instead


@dataclass(frozen=True)
class Source:
    """One generator of a recipe and its share of the tasks."""

    name: str
    weight: float = 1.0


@dataclass(frozen=True)
class Options:
    """What ``--set reasoning_gym.KEY=VALUE`` sets."""

    size: int = 500
    seed: int = 0
    levels: int = 3
    config: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def library() -> Any:
    return require("reasoning_gym", EXTRA, "reasoning_gym")


def generator_names() -> list[str]:
    """Every generator the installed reasoning-gym offers (the library imported)."""
    from reasoning_gym.factory import DATASETS

    library()
    return sorted(name for name in DATASETS if name not in SKIPPED)


def parse_sources(param: str) -> list[Source]:
    """``chain_sum=3+basic_arithmetic`` -> its generators and weights (one ``UserError`` line
    for a bad spelling or an unknown generator, with close and valid names)."""
    names = generator_names()
    sources: list[Source] = []
    for part in param.split("+"):
        name, sep, weight = part.strip().partition("=")
        name = name.strip()
        if name not in names:
            raise UserError(_unknown(name, names))
        try:
            value = float(weight) if sep else 1.0
        except ValueError:
            value = -1.0
        if not value > 0 or value != value or value == float("inf"):
            raise UserError(
                f"reasoning_gym:{param}: weight {weight!r} of {name} must be a positive number "
                "(NAME=WEIGHT, e.g. chain_sum=3+basic_arithmetic)"
            )
        if any(s.name == name for s in sources):
            raise UserError(f"reasoning_gym:{param}: {name} is named twice; give it once")
        sources.append(Source(name, value))
    return sources


def _unknown(name: str, names: list[str]) -> str:
    close = difflib.get_close_matches(name, names, n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    some = ", ".join(names[:8])
    return (
        f"unknown reasoning_gym generator {name!r}; {hint}{len(names)} generators, e.g. {some} "
        "(`python -c 'import reasoning_gym.factory as f; print(sorted(f.DATASETS))'` lists them)"
    )


def parse_options(options: Mapping[str, Any]) -> Options:
    """The options, checked: one ``UserError`` line naming the bad one."""
    parsed = Options(**{k: v for k, v in options.items() if k in OPTIONS})
    for key in ("size", "seed", "levels"):
        value = getattr(parsed, key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"--set reasoning_gym.{key}: expected a whole number, got {value!r}")
    if parsed.size < 1 or parsed.levels < 0 or parsed.levels > 64:
        raise UserError(
            "--set reasoning_gym.size must be at least 1 and reasoning_gym.levels 0 to 64 "
            f"(got size {parsed.size}, levels {parsed.levels})"
        )
    if not isinstance(parsed.config, Mapping):
        raise UserError("--set reasoning_gym.config: expected a mapping of generator settings")
    return parsed


def config_of(options: Options, sources: list[Source], name: str) -> dict[str, Any]:
    """The settings ``options.config`` gives generator ``name`` (a mix keys them by name)."""
    config = dict(options.config)
    if len(sources) > 1 or name in config:
        picked = config.get(name, {})
        if not isinstance(picked, Mapping):
            raise UserError(f"--set reasoning_gym.config.{name}: expected a mapping of settings")
        return dict(picked)
    return config


def seed_of(seed: int, name: str, level: int) -> int:
    """A generator level's own seed, from the recipe's seed (stable across versions of Python)."""
    digest = hashlib.sha256(f"{seed}:{name}:{level}".encode()).hexdigest()
    return int(digest[:8], 16)


def level_count(name: str, levels: int) -> int:
    """How many curriculum levels generator ``name`` can give (0: no curriculum here)."""
    from reasoning_gym.factory import create_curriculum, has_curriculum

    if not levels or not has_curriculum(name):
        return 0
    attributes = create_curriculum(name).attributes.values()
    return min(levels, max((len(a.levels) for a in attributes), default=0))


@functools.lru_cache(maxsize=256)
def _dataset(name: str, level: int | None, seed: int, size: int, config_json: str) -> Any:
    from reasoning_gym.factory import DATASETS, create_curriculum

    dataset_class, config_class = DATASETS[name]
    settings = {**json.loads(config_json), "seed": seed, "size": size}
    if level is None:
        config = config_class(**settings)
    else:
        curriculum = create_curriculum(name)
        curriculum.set_global_level(level)
        config = curriculum.generate_configuration(settings)
    return dataset_class(config=config)


def dataset(name: str, level: int | None, seed: int, size: int, config: Mapping[str, Any]):
    """The generator ``name`` at curriculum ``level`` (None: its default settings)."""
    library()
    return _dataset(name, level, seed, size, json.dumps(dict(config), sort_keys=True))


def rebuilt_entry(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The entry a row's ``rg`` spec was generated from, generated again (once per process)."""
    config = json.dumps(dict(spec.get("config") or {}), sort_keys=True)
    level = spec.get("curriculum_level")
    entry = _entry(spec["source"], level, spec["seed"], spec["size"], config, spec["index"])
    return copy.deepcopy(entry)  # a scorer may change what it is given


@functools.lru_cache(maxsize=4096)
def _entry(name: str, level: int | None, seed: int, size: int, config: str, index: int) -> dict:
    library()
    return _dataset(name, level, seed, size, config)[index]


def _plan(source: Source, count: int, options: Options, config: dict) -> list[tuple[Any, int]]:
    """The (curriculum level or None, tasks) of one generator: its usable levels, tasks shared
    evenly. A level the library cannot generate at ends the levels there."""
    levels = []
    for level in range(level_count(source.name, options.levels)):
        try:
            dataset(source.name, level, seed_of(options.seed, source.name, level), 1, config)[0]
        except Exception:  # the library's settings at this level are broken: stop below it
            break
        levels.append(level)
    levels = levels or [None]
    shares = [count // len(levels) + (i < count % len(levels)) for i in range(len(levels))]
    return [(level, n) for level, n in zip(levels, shares, strict=True) if n]


def counts(sources: list[Source], size: int) -> list[int]:
    """Each generator's number of tasks: ``size`` shared by weight (each at least one)."""
    total = sum(s.weight for s in sources)
    raw = [size * s.weight / total for s in sources]
    shares = [max(1, int(x)) for x in raw]
    order = sorted(range(len(raw)), key=lambda i: raw[i] - int(raw[i]), reverse=True)
    for i in order[: max(0, size - sum(shares))]:
        shares[i] += 1
    return shares


def rows(sources: list[Source], options: Options) -> Iterator[dict[str, Any]]:
    """Every task row of the recipe, generator by generator, level by level."""
    for source, count in zip(sources, counts(sources, options.size), strict=True):
        config = config_of(options, sources, source.name)
        made = []
        for level, n in _plan(source, count, options, config):
            seed = seed_of(options.seed, source.name, 0 if level is None else level)
            built = dataset(source.name, level, seed, n, config)
            made += [_row(source.name, level, seed, n, i, config, _generate(built, i, level))
                     for i in range(n)]  # fmt: skip
        multiline = any("\n" in (row["answer"] or "") for row in made)
        for row in made:  # the answer runs to the end of the reply, or to the end of its line
            row["rg"]["multiline"] = multiline
            yield row


def _generate(built: Any, index: int, level: int | None) -> dict[str, Any]:
    """Entry ``index`` of a generator, or one ``UserError`` line when the library fails."""
    try:
        return built[index]
    except Exception as exc:
        name = built.__class__.__name__
        fix = (
            f"use fewer levels: --set reasoning_gym.levels={level}"
            if level
            else "change its settings (--set reasoning_gym.config=...) or the seed"
        )
        raise UserError(
            f"reasoning-gym's {name} failed to make task {index} at level {level or 0} "
            f"({type(exc).__name__}: {str(exc)[:120]}); {fix}"
        ) from None


def _row(name, level, seed, size, index, config, entry) -> dict[str, Any]:
    answer = entry.get("answer")
    return {
        "id": f"{name}/{0 if level is None else level}/{index}",
        "question": entry["question"],
        "answer": None if answer is None else str(answer),
        "level": 0 if level is None else level,
        "source": name,
        "metadata": json.loads(json.dumps(entry.get("metadata") or {}, default=str)),
        "rg": {
            "source": name,
            "curriculum_level": level,
            "seed": seed,
            "size": size,
            "index": index,
            "config": config,
        },
    }


def example(name: str, options: Options, config: Mapping[str, Any]) -> dict[str, Any] | None:
    """A worked example of generator ``name`` (its easiest level, a seed no task uses), or None
    when the generator has no single gold answer."""
    levels = _plan(Source(name), 1, options, dict(config))
    level = levels[0][0] if levels else None
    entry = dataset(name, level, seed_of(options.seed, name, -1), 1, config)[0]
    answer = entry.get("answer")
    return None if answer is None else {"question": entry["question"], "answer": str(answer)}
