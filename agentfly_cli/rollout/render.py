"""Show a trajectory token by token: trained (sampled) tokens apart from masked ones.

Used by ``agentfly view`` for the terminal (Rich) and for a standalone HTML page.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path

from agentfly_cli.errors import UserError
from agentfly_cli.files.json_files import BOM, decode_text, parse_json
from agentfly_cli.trajectory import Trajectory, record_from_json


@dataclass
class TokenPiece:
    """One token of a trajectory, as text."""

    text: str
    token_id: int
    trained: bool
    logprob: float | None
    role: str


def token_pieces(trajectory: Trajectory, tokenizer) -> list[TokenPiece]:
    """Decode each id on its own, keeping bytes that only make sense together readable."""
    roles = [""] * len(trajectory.ids)
    for turn in trajectory.turns:
        for i in range(turn.start, turn.end):
            roles[i] = turn.role
    pieces = []
    texts = _decode_each(tokenizer, trajectory.ids)
    for i, (token_id, text) in enumerate(zip(trajectory.ids, texts, strict=True)):
        pieces.append(
            TokenPiece(
                text, token_id, bool(trajectory.loss_mask[i]), trajectory.logprobs[i], roles[i]
            )
        )
    return pieces


def _decode_each(tokenizer, ids: list[int]) -> list[str]:
    """Each id decoded on its own (special tokens kept), in one batch where the tokenizer can."""
    singles = [[token_id] for token_id in ids]
    batch = getattr(tokenizer, "decode_batch", None)  # the `tokenizers` library's Tokenizer
    if batch is not None:
        return batch(singles, skip_special_tokens=False)
    return [tokenizer.decode(single, skip_special_tokens=False) for single in singles]


def read_trajectory_at(path: str | Path, index: int) -> tuple[Trajectory | None, int]:
    """The ``index``-th trajectory of a JSONL file and how many the file holds.

    Only that line is parsed (a file of thousands of chains opens as fast as one); blank lines
    are skipped. ``None`` when ``index`` is out of range.
    """
    path = Path(path)
    if path.is_dir():
        raise UserError(
            f"{path} is a folder, not a trajectory file; pass the --out file of a rollout"
        )
    if not path.is_file():
        raise UserError(
            f"trajectory file {str(path)!r} not found; pass the --out file of a rollout"
        )
    count, chosen = 0, None
    with open(path, "rb") as lines:
        for number, raw in enumerate(lines, 1):
            if not raw.strip():
                continue
            if count == index:
                chosen = (number, raw.removeprefix(BOM) if number == 1 else raw)
            count += 1
    if chosen is None:
        return None, count
    number, raw = chosen
    where, fix = f"{path}:{number}", "pass a JSONL file written by `agentfly rollout --out`"
    data = parse_json(decode_text(raw, where, fix), where, fix)
    return record_from_json(data, where), count


def load_tokenizer_for(trajectory: Trajectory, override: str | None = None):
    """The tokenizer recorded in the trajectory's meta (or ``override``), or None.

    A folder with a ``tokenizer.json`` is read with the ``tokenizers`` library alone, in a few
    milliseconds: importing transformers (and torch with it) would take seconds.
    """
    source = override or trajectory.meta.get("tokenizer")
    if not source:
        return None
    tokenizer_file = Path(source) / "tokenizer.json"
    if tokenizer_file.is_file():
        from tokenizers import Tokenizer

        try:
            return Tokenizer.from_file(str(tokenizer_file))
        except Exception:  # a file the Rust library cannot read: try transformers
            pass
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError):
        return None


def rich_text(pieces: list[TokenPiece]):
    """A Rich Text: trained tokens bold green on a dark background, masked tokens dim.

    Control characters in the tokens are shown escaped, never sent to the terminal.
    """
    from rich.text import Text

    from agentfly_cli.files.safe_text import printable

    text = Text()
    for piece in pieces:
        style = "bold green on grey11" if piece.trained else "grey50"
        text.append(printable(piece.text), style=style)
    return text


_CSS = """
body { font-family: ui-monospace, Menlo, Consolas, monospace; margin: 2em; background: #fafafa; }
.legend span { padding: 2px 6px; margin-right: 1em; }
pre { white-space: pre-wrap; word-wrap: break-word; line-height: 1.5; font-size: 13px; }
.t { background: #c8f7c5; color: #064; border-bottom: 2px solid #2a2; }
.m { color: #777; }
table { border-collapse: collapse; margin: 1em 0; }
td, th { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
"""


def html_page(trajectory: Trajectory, pieces: list[TokenPiece] | None, title: str) -> str:
    """A standalone HTML page of one trajectory."""
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        "<div class='legend'><span class='t'>trained (sampled, loss mask 1)</span>"
        "<span class='m'>masked (prompt, observations; loss mask 0)</span></div>",
        "<table>",
    ]
    facts = {
        "reward": trajectory.reward,
        "finish_reason": trajectory.finish_reason,
        "turns": trajectory.num_turns,
        "group_id": trajectory.group_id,
        "tokens": f"{len(trajectory.ids)} ({sum(trajectory.loss_mask)} trained)",
        "prediction": trajectory.prediction,
        "task": json.dumps(trajectory.task, ensure_ascii=False),
    }
    for key, value in facts.items():
        parts.append(f"<tr><th>{key}</th><td>{html.escape(str(value))}</td></tr>")
    parts.append("</table><pre>")
    if pieces is not None:
        for piece in pieces:
            css = "t" if piece.trained else "m"
            tip = f"id {piece.token_id}" + (
                f", logprob {piece.logprob:.4f}" if piece.logprob is not None else ""
            )
            parts.append(f"<span class='{css}' title='{tip}'>{html.escape(piece.text)}</span>")
    else:
        for message in trajectory.messages:
            css = "t" if message.get("role") == "assistant" else "m"
            parts.append(
                f"<span class='{css}'>[{html.escape(message.get('role', ''))}] "
                f"{html.escape(str(message.get('content', '')))}</span>\n"
            )
    parts.append("</pre></body></html>\n")
    return "".join(parts)
