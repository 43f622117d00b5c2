"""Parse in a child process under a time cap, so that a parser that stalls fails its test in
seconds instead of holding the test run for hours (a regex engine cannot be interrupted)."""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

LINE_OPTIONS = {
    "commands": {
        "CALC": {"tool": "calculator", "argument": "expression"},
        "SEARCH": {"tool": "search", "argument": "query"},
        "ANSWER": {"tool": None},
    }
}


@dataclass
class Outcome:
    """What a parse took and gave, reduced to what the tests check."""

    seconds: float  # CPU time of the parse: other load on the machine does not count
    calls: int
    errors: int
    raw_chars: int  # the raw text kept by every call and error together
    content_chars: int
    names_ok: bool  # every call has a non-empty str name and dict-or-str arguments
    messages_ok: bool  # every error has a non-empty str message


def _parse(name: str, text: str) -> Outcome:
    from agentfly_cli.chat.parsers import get_parser

    parser = get_parser(name, LINE_OPTIONS if name == "line" else None)
    started = time.thread_time()
    parsed = parser.parse(text)
    seconds = time.thread_time() - started
    return Outcome(
        seconds=seconds,
        calls=len(parsed.calls),
        errors=len(parsed.errors),
        raw_chars=sum(len(c.raw) for c in parsed.calls) + sum(len(e.raw) for e in parsed.errors),
        content_chars=len(parsed.content),
        names_ok=all(
            isinstance(c.name, str) and c.name and isinstance(c.arguments, (dict, str))
            for c in parsed.calls
        ),
        messages_ok=all(isinstance(e.message, str) and e.message for e in parsed.errors),
    )


class ParseClock:
    """Parses texts in one spawned worker; a parse over its cap kills the worker."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None

    def parse(self, name: str, text: str, cap: float) -> Outcome | None:
        """The outcome, or None when the parse did not finish within ``cap`` seconds."""
        if self._pool is None:
            context = multiprocessing.get_context("spawn")
            self._pool = ProcessPoolExecutor(max_workers=1, mp_context=context)
            self._pool.submit(_parse, "hermes", "").result(timeout=60)  # imports, not timed
        future = self._pool.submit(_parse, name, text)
        try:
            return future.result(timeout=cap)
        except FutureTimeout:
            self.close()
            return None

    def close(self) -> None:
        if self._pool is None:
            return
        for process in list(getattr(self._pool, "_processes", {}).values()):
            process.kill()  # our own worker, stalled in a parse
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._pool = None
