"""Read the rows of a task data file: JSONL, JSON, Parquet or a ``datasets`` folder.

Every way a file can be wrong (missing, a folder of something else, not UTF-8, binary, nested
too deeply, not JSON, a broken Parquet file) is a one-line :class:`UserError` naming the file
and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.files.json_files import iter_json_lines, read_json_file

FORMATS = "a .jsonl file of one JSON object per line, .json, .parquet, or a datasets folder"
# files that `datasets`' save_to_disk writes: a Dataset's, and a DatasetDict's
DATASETS_MARKERS = ("state.json", "dataset_dict.json")


def read_rows(path: str | Path) -> list[Any]:
    """The rows of the data file or folder at ``path`` (not yet checked as tasks)."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"data file {str(path)!r} not found; pass --data FILE.jsonl")
    if path.is_dir():
        return _load_datasets_folder(path)
    if path.suffix == ".jsonl":
        return [row for _, row in iter_json_lines(path, "write one JSON object per line")]
    if path.suffix == ".json":
        return _rows_of_json(path, read_json_file(path, "write a JSON list of task objects"))
    if path.suffix == ".parquet":
        return _load_parquet(path)
    raise UserError(f"data file {str(path)!r} has an unknown format; use {FORMATS}")


def _rows_of_json(path: Path, data: Any) -> list[Any]:
    if isinstance(data, dict):
        for key in ("data", "rows", "tasks"):
            if isinstance(data.get(key), list):
                return data[key]
    if not isinstance(data, list):
        raise UserError(f"{path}: expected a JSON list of task objects")
    return data


def _load_parquet(path: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError("reading Parquet needs pyarrow: pip install pyarrow") from None
    try:
        return pq.read_table(path).to_pylist()
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(
            f"{path} is not a readable Parquet file ({first[:120]}); pass --data as {FORMATS}"
        ) from None


def _load_datasets_folder(path: Path) -> list[dict[str, Any]]:
    if not any((path / marker).is_file() for marker in DATASETS_MARKERS):
        raise UserError(
            f"{path} is a folder but not one saved with datasets' save_to_disk (it has no "
            f"{' or '.join(DATASETS_MARKERS)}); pass --data as {FORMATS}"
        )
    try:
        import datasets
    except ImportError:
        raise UserError(
            f"{path} is a folder; reading a datasets folder needs `pip install datasets`"
        ) from None
    try:
        loaded = datasets.load_from_disk(str(path))
    except (OSError, ValueError) as exc:  # FileNotFoundError for a folder of something else
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"{path}: cannot read it as a datasets folder ({first})") from None
    if isinstance(loaded, datasets.DatasetDict):
        split = "train" if "train" in loaded else next(iter(loaded))
        loaded = loaded[split]
    return [dict(row) for row in loaded]
