"""Recorded trajectories shown to a person (``agentfly view``): read one, decode its tokens,
render it as Rich text or a standalone HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentfly_cli.rollout.render import TokenPiece
    from agentfly_cli.trajectory import Trajectory


def read_trajectory_at(path: str | Path, index: int) -> tuple[Trajectory | None, int]:
    """The ``index``-th trajectory of a JSONL file (None when out of range) and how many the
    file holds; a file that cannot be read is a UserError."""
    from agentfly_cli.rollout.render import read_trajectory_at as read

    return read(path, index)


def load_tokenizer_for(trajectory: Trajectory, override: str | None = None) -> Any:
    """The tokenizer recorded in ``trajectory``'s meta (or the folder ``override``), or None."""
    from agentfly_cli.rollout.render import load_tokenizer_for as load

    return load(trajectory, override)


def token_pieces(trajectory: Trajectory, tokenizer: Any) -> list[TokenPiece]:
    """Each id of ``trajectory`` decoded on its own, with its loss mask and role."""
    from agentfly_cli.rollout.render import token_pieces as pieces

    return pieces(trajectory, tokenizer)


def rich_text(pieces: list[TokenPiece]) -> Any:
    """A Rich Text of ``pieces``: trained tokens highlighted, masked ones dim."""
    from agentfly_cli.rollout.render import rich_text as text

    return text(pieces)


def html_page(trajectory: Trajectory, pieces: list[TokenPiece] | None, title: str) -> str:
    """A standalone HTML page of one trajectory (its messages when ``pieces`` is None)."""
    from agentfly_cli.rollout.render import html_page as page

    return page(trajectory, pieces, title)


def check_page_target(path: Path, flag: str = "--html") -> None:
    """``path`` can be written as a file (created, or replaced); a UserError naming ``flag``
    if not."""
    from agentfly_cli.files.output_paths import check_file_target

    check_file_target(path, flag, "page.html")


def write_page(path: Path, page: str) -> None:
    """Write ``page`` to ``path`` all or nothing (a temporary file renamed over it)."""
    from agentfly_cli.files.output_paths import write_all, write_whole

    write_whole(path, lambda out: write_all(out.fileno(), page.encode("utf-8")))
