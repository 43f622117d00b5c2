"""Load a tokenizer folder so that text -> ids -> text gives the text back.

transformers 5 rebuilds some tokenizers from their class instead of reading ``tokenizer.json``
as is. For DeepSeek-V3 (``tokenizer_class: LlamaTokenizerFast`` over a byte-level BPE) the
result is a Metaspace tokenizer that encodes to other ids and decodes without any space
("Hello world" -> "Helloworld"). ``tokenizer.json`` read as is
(``PreTrainedTokenizerFast.from_pretrained``) is what transformers 4 loaded, and it is exact.

Loaders (``backend.tokenizer_loader``): ``auto`` (AutoTokenizer; where it loses text and
``tokenizer.json`` as is does not, the latter, with one warning), ``transformers`` (AutoTokenizer
only) and ``tokenizer.json`` (the file as is).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError

LOADERS = ("auto", "transformers", "tokenizer.json")
ROUND_TRIP_SAMPLES = [
    "The quick brown fox jumps over the lazy dog.",
    "  two leading spaces, a tab\tand a newline\n",
    'def f(x):\n    return {"a": [1, 2.5, -3]}\n',
    "Ünïcödé: café, naïve, 中文, emoji 🙂",
    "12345 + 678 = 13023",
]
# Set on a tokenizer that ``auto`` read from tokenizer.json because AutoTokenizer lost text:
# what AutoTokenizer did, for `agentfly doctor`.
SUBSTITUTED = "agentfly_substituted"
log = logging.getLogger(__name__)
_warned: set[str] = set()


def round_trip_loss(tokenizer: Any) -> tuple[str, str] | None:
    """The first sample that text -> ids -> text changes, and what came back; None if none."""
    for sample in ROUND_TRIP_SAMPLES:
        try:
            ids = tokenizer.encode(sample, add_special_tokens=False)
            back = tokenizer.decode(
                ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
        except Exception as exc:  # a tokenizer that cannot even do this loses the text
            return sample, f"<{type(exc).__name__}>"
        if back != sample:
            return sample, back
    return None


def load_tokenizer(spec: str | os.PathLike, loader: str = "auto") -> Any:
    """A tokenizer from a local folder (never from a hub), read by ``loader`` (see the module)."""
    path = Path(spec).expanduser()
    if not path.is_dir():
        raise UserError(
            f"tokenizer folder {os.fspath(spec)!r} not found; pass a local model folder"
        )
    if loader not in LOADERS:
        raise UserError(f"tokenizer loader {loader!r} is unknown; use one of: {', '.join(LOADERS)}")
    has_file = (path / "tokenizer.json").is_file()
    if loader == "tokenizer.json":
        if not has_file:
            raise UserError(
                f"tokenizer loader 'tokenizer.json': {path} has no tokenizer.json; "
                "use backend.tokenizer_loader: auto"
            )
        return _load(path, as_is=True)
    tokenizer = _load(path, as_is=False)
    if loader == "transformers" or not has_file:
        return tokenizer
    loss = round_trip_loss(tokenizer)
    if loss is None:
        return tokenizer
    try:
        as_is = _load(path, as_is=True)
    except UserError:
        return tokenizer
    if round_trip_loss(as_is) is not None:
        return tokenizer  # no better: the doctor reports the loss
    note = (
        f"transformers' AutoTokenizer ({type(tokenizer).__name__}) turns {loss[0]!r} into "
        f"{loss[1]!r}"
    )
    setattr(as_is, SUBSTITUTED, note)
    if str(path) not in _warned:
        _warned.add(str(path))
        log.warning(
            "tokenizer %s: %s; reading its tokenizer.json as is instead, which gives text back "
            "(backend.tokenizer_loader: auto; `agentfly doctor %s` explains)",
            path,
            note,
            path,
        )
    return as_is


def _load(path: Path, *, as_is: bool) -> Any:
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    cls = PreTrainedTokenizerFast if as_is else AutoTokenizer
    try:
        return cls.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:  # transformers raises many kinds for a broken folder
        raise UserError(
            f"cannot load a tokenizer from {os.fspath(path)!r} ({type(exc).__name__}: {exc}); "
            "the folder needs tokenizer.json or the tokenizer's vocabulary files"
        ) from exc
