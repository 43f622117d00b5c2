"""One call of an agent function, run so that nothing it does can take the run down.

Each call runs on a daemon thread of its own; an async agent (or a sync one that returns an
awaitable) runs on an event loop of its own in that thread. So an agent that blocks, sync or
async, blocks only itself, and the deadline (``agent.timeout_s``) is kept from the run's loop.
At the deadline an async agent is cancelled; a thread that still runs after ``agent.grace_s``
cannot be stopped, so it is abandoned: it holds no slot, and as a daemon it is not joined at
exit. More than ``agent.max_abandoned`` of them alive at once fail the run with one line.

Whatever the agent raises, ``SystemExit`` and ``KeyboardInterrupt`` included, and a result that
is no reward (not finite, too large for a float) or has no text (its ``str()`` raises), is
:class:`AgentFailed`: that episode's error, with a kind of its own. The result is made plain
(a ``float``, a ``str`` or ``None``) in the agent's thread, so no agent code runs on the loop.
A Ctrl-C of the user reaches the main thread, where no agent code runs: it stops the run.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from agentfly_cli.errors import UserError
from agentfly_cli.runtime.deadlines import within

log = logging.getLogger(__name__)

Plain = float | str | None  # what an agent's result becomes: a reward, an answer, or nothing


class AgentFailed(Exception):
    """An episode's agent failed; ``str()`` is the recorded ``"Kind: message"``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind


def _text(value: Any) -> str:
    """``str(value)``, or what went wrong making it (never raises)."""
    try:
        text = str(value)
        return text if type(text) is str else str.__str__(text)
    except BaseException as exc:  # noqa: BLE001 (agent code: nothing may escape)
        return f"<{_name(value)} whose str() raised {_name(exc)}>"


def _name(value: Any) -> str:
    try:
        return str(type(value).__name__)
    except BaseException:  # noqa: BLE001
        return "object"


def failure_of(exc: BaseException) -> AgentFailed:
    """What the agent raised, as its episode's error."""
    if isinstance(exc, SystemExit):
        return AgentFailed("AgentExit", f"the agent called sys.exit({_text(exc.code)})")
    if isinstance(exc, KeyboardInterrupt):
        return AgentFailed("AgentInterrupt", "the agent raised KeyboardInterrupt")
    return AgentFailed("AgentError", f"{_name(exc)}: {_text(exc)}")


def plain(result: Any) -> Plain:
    """The agent's result as a finite reward, an answer text, or ``None``.

    Raises :class:`AgentFailed` (``AgentBadResult``) for a number that is not a finite float
    and for a result whose ``str()`` raises.
    """
    if result is None:
        return None
    if isinstance(result, (int, float)) and not isinstance(result, bool):
        try:
            value = float(result)
        except (OverflowError, ValueError, TypeError) as exc:
            raise AgentFailed(
                "AgentBadResult",
                f"the agent returned a number that is no reward ({_name(exc)}: {_text(exc)}); "
                "return a finite float",
            ) from None
        if not math.isfinite(value):
            raise AgentFailed(
                "AgentBadResult", f"the agent returned {value!r}, not a finite reward"
            )
        return value
    try:
        text = str(result)
        return text if type(text) is str else str.__str__(text)
    except BaseException as exc:  # noqa: BLE001
        raise AgentFailed(
            "AgentBadResult",
            f"the agent returned a {_name(result)} whose str() raised {_name(exc)}: "
            f"{_text(exc)}; return a str (the answer) or a number (the reward)",
        ) from None


class _DaemonThreads(ThreadPoolExecutor):
    """An agent loop's default executor: each call on a daemon thread of its own, so that one
    that hangs is not joined at exit (``ThreadPoolExecutor`` workers are)."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 (handed to the awaiting agent)
                future.set_exception(exc)

        threading.Thread(target=work, name="agentfly-agent-worker", daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Nothing to join: the threads are daemons."""


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class _Call:
    """One agent call on its own daemon thread; ``result`` and ``ended`` resolve on the run's
    loop (with a :data:`Plain` or an :class:`AgentFailed`, and when the thread is done)."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], name: str) -> None:
        self._fn, self._args = fn, args
        self._loop = asyncio.get_running_loop()
        self.result: asyncio.Future[Any] = self._loop.create_future()
        self.ended: asyncio.Future[None] = self._loop.create_future()
        self._lock = threading.Lock()
        self._agent_loop: asyncio.AbstractEventLoop | None = None
        self._agent_task: asyncio.Task[Any] | None = None
        self._cancelled = False
        self.thread = threading.Thread(target=self._body, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def cancel(self) -> None:
        """Ask an async agent to stop (a sync one cannot be asked)."""
        with self._lock:
            self._cancelled = True
            loop, task = self._agent_loop, self._agent_task
        if loop is not None and task is not None:
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # its loop is closed: it has finished
                pass

    def _body(self) -> None:
        try:
            try:
                outcome: Any = plain(self._run())
            except AgentFailed as failed:
                outcome = failed
            except BaseException as exc:  # noqa: BLE001 (SystemExit, KeyboardInterrupt: data)
                outcome = failure_of(exc)
            self._deliver(self.result, outcome)
        finally:
            self._close_agent_loop()
            self._deliver(self.ended, None)

    def _run(self) -> Any:
        result = self._fn(*self._args)
        if not inspect.isawaitable(result):
            return result
        loop = asyncio.new_event_loop()
        loop.set_default_executor(_DaemonThreads())  # its to_thread calls: never joined at exit
        task = loop.create_task(_awaited(result))
        with self._lock:
            self._agent_loop, self._agent_task = loop, task
            if self._cancelled:
                task.cancel()
        return loop.run_until_complete(task)

    def _close_agent_loop(self) -> None:
        """What ``asyncio.run`` does at the end: cancel what the agent left, then close."""
        loop = self._agent_loop
        if loop is None:
            return
        try:
            left = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in left:
                task.cancel()
            if left:
                loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        except BaseException as exc:  # noqa: BLE001 (the agent's leftovers: not the run's)
            log.debug("agent loop cleanup failed: %r", exc)
        finally:
            loop.close()

    def _deliver(self, future: asyncio.Future[Any], value: Any) -> None:
        def settle() -> None:
            if not future.done():
                future.set_result(value)

        try:
            self._loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the run's loop is closed: nobody waits any more
            pass


class AgentCaller:
    """Runs calls of ``fn(task, base_url)`` under a deadline; counts the threads it abandoned."""

    def __init__(
        self, fn: Callable[..., Any], timeout_s: float, grace_s: float, max_abandoned: int
    ) -> None:
        self.fn, self.timeout_s, self.grace_s = fn, timeout_s, grace_s
        self.max_abandoned = max_abandoned
        self._abandoned: list[threading.Thread] = []
        self.abandoned_total = 0  # every thread ever abandoned (those alive: ``abandoned``)
        self._calls = 0

    @property
    def abandoned(self) -> int:
        """Abandoned agent threads that are still running."""
        self._abandoned = [t for t in self._abandoned if t.is_alive()]
        return len(self._abandoned)

    async def call(self, task: dict[str, Any], base_url: str) -> Plain:
        """The agent's plain result; :class:`AgentFailed` when it failed or ran out of time."""
        self._calls += 1
        call = _Call(self.fn, (task, base_url), f"agentfly-agent-{self._calls}")
        call.start()
        try:
            outcome = await within(asyncio.shield(call.result), self.timeout_s)
        except asyncio.TimeoutError:
            call.cancel()
            await asyncio.wait([call.ended], timeout=self.grace_s)
            message = f"the agent did not finish within {self.timeout_s:g} s (agent.timeout_s)"
            if not call.ended.done():
                self._abandon(call.thread)
                message += "; its thread could not be stopped and was abandoned"
            raise AgentFailed("AgentTimeout", message) from None
        except asyncio.CancelledError:  # the run stops: ask the agent to stop too
            call.cancel()
            raise
        if isinstance(outcome, AgentFailed):
            raise outcome
        return outcome

    def _abandon(self, thread: threading.Thread) -> None:
        self._abandoned.append(thread)
        self.abandoned_total += 1
        alive = self.abandoned
        if self.abandoned_total == 1:
            log.warning(
                "an agent episode outlived agent.timeout_s (%g s) and agent.grace_s (%g s) and "
                "cannot be stopped: its thread is abandoned and runs on (warned once; at most "
                "agent.max_abandoned = %d at a time)",
                self.timeout_s, self.grace_s, self.max_abandoned,
            )  # fmt: skip
        if alive > self.max_abandoned:
            raise UserError(
                f"{alive} agent threads are still running past agent.timeout_s "
                f"(more than agent.max_abandoned = {self.max_abandoned}): the agent hangs in "
                "code that cannot be cancelled; give its waits a timeout, or raise "
                "agent.max_abandoned"
            )
